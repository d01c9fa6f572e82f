"""A generated block of a Markdown file, between a tool's markers:

    <!-- NAME:begin (anything: how to regenerate it) -->
    ...generated text...
    <!-- NAME:end -->

replace_block(path, name, text, fail) puts text (its trailing newlines trimmed, one added) between
the begin marker's line and the end marker, leaving the rest of the file as it was, and writes the
file through a temporary file and a rename. fail(message) (which must not return: the tools print
it and exit 2) on a file that cannot be read or has no such markers, in that order. Used by
grid_summary.py, decode_summary.py and variants_summary.py (--readme)."""
import os


def replace_block(path, name, text, fail):
    try:
        with open(path, encoding="utf-8") as f:
            doc = f.read()
    except OSError as e:
        fail(f"--readme {path}: {e.strerror}")
    begin, end = f"<!-- {name}:begin", f"<!-- {name}:end -->"
    i, j = doc.find(begin), doc.find(end)
    if i < 0 or j < i:
        fail(f"--readme {path}: no '{begin} ... -->' ... '{end}' markers")
    i = doc.index("\n", i) + 1
    doc = doc[:i] + text.rstrip("\n") + "\n" + doc[j:]
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(doc)
    os.replace(tmp, path)
