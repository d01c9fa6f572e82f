#!/usr/bin/env python3
"""The section "Against FlashAttention-3 and cuDNN" of results/h200/README.md: scripts/grid_summary.py fa3.

  python3 scripts/fa3_grid_summary.py results/h200/fa3_grid.json results/h200/fa3_grid.peers.json
"""
import os
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402
from scripts import grid_summary  # noqa: E402

if __name__ == "__main__":
    run(grid_summary.main, grid="fa3")
