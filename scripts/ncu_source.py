#!/usr/bin/env python3
"""Summarise `ncu -i REP --page source --csv --print-source sass` output: for each kernel block,
the SASS instructions that take the most warp-stall samples and the most excess shared-memory
wavefronts (bank conflicts), so that a profile names the instruction, not only the counter.

    python3 scripts/ncu_source.py SOURCE.csv[.gz] [--top N] > SOURCE.txt

(results/h200/issue27/ncu_job.sh writes SOURCE.csv.gz for each of our kernels it profiles.)

ncu's column names differ between versions, so the columns are found by substring (case
ignored): "stall sampling (all" and "shared excessive" (with "wavefronts"); when one is missing
the header is printed instead, so that the next run can name it."""
import argparse
import csv
import gzip
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402


def blocks(lines):
    """(title, header, rows) per kernel: a header row is one whose fields name an address."""
    title, header, rows = "", None, []
    for rec in csv.reader(lines):
        if not rec:
            continue
        if any("address" in f.lower() for f in rec[:2]) and any("source" in f.lower() for f in rec):
            if header is not None:
                yield title, header, rows
            header, rows = rec, []
        elif header is None or len(rec) < len(header) // 2:
            if header is not None and rows:
                yield title, header, rows
                header, rows = None, []
            title = " ".join(rec)[:160]
        else:
            rows.append(rec)
    if header is not None:
        yield title, header, rows


def read_page(path):
    """A source page's text (PATH may be gzipped); OSError if it cannot be read."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", errors="replace") as f:
        return f.read()


def source_column(header):
    """The index of the header's source (instruction text) column; 1 if none is named so."""
    low = [h.lower() for h in header]
    return next((i for i, h in enumerate(low) if h == "source" or h.endswith("source")), 1)


def num(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    text = read_page(a.csv)
    n = 0
    for title, header, rows in blocks(io.StringIO(text)):
        n += 1
        low = [h.lower() for h in header]
        src = source_column(header)
        want = {"warp stall samples": lambda h: "stall sampling (all" in h,
                "excess shared wavefronts": lambda h: "shared" in h and "excessive" in h and "wavefront" in h,
                "instructions executed": lambda h: h.startswith("instructions executed")}
        print(f"== {title or 'kernel ' + str(n)}: {len(rows)} instructions")
        for name, match in want.items():
            col = next((i for i, h in enumerate(low) if match(h)), None)
            if col is None:
                if name != "instructions executed":  # optional
                    print(f"  ({name}: no such column; the header is: {' | '.join(header)})")
                continue
            total = sum(num(r[col]) for r in rows if col < len(r))
            print(f"  top {a.top} by {name} ({header[col]}; total {total:,.0f}):")
            ranked = sorted((r for r in rows if col < len(r)), key=lambda r: -num(r[col]))[:a.top]
            for r in ranked:
                v = num(r[col])
                share = f"{100 * v / total:5.1f}%" if total else "  -  "
                print(f"    {share} {v:>14,.0f}  {r[0]:>8}  {r[src][:90] if src < len(r) else ''}")
    if n == 0:
        print(f"ncu_source.py: no instruction table in {a.csv}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    run(main)
