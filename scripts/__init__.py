"""attnbench's Python tools (pyproject.toml). Each one runs as a file or as a module:

    python3 scripts/plot.py RESULTS.json --out DIR
    python3 -m scripts.plot RESULTS.json --out DIR        (from the repository root, or installed)
"""
