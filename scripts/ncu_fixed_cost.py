#!/usr/bin/env python3
"""Split one kernel's warp-stall samples, instruction by instruction, into a fixed cost per block
and a cost per K/V tile, from two profiles that differ only in how many tiles a block runs (the
same kernel and grid at two sequence lengths), so that a profile names the instructions a
block's start and end wait at, not only how long they take.

    python3 scripts/ncu_fixed_cost.py SOURCE.csv[.gz] --pair SHORT:LONG:N_SHORT:N_LONG [--pair ...]
                                      [--top N]

SOURCE is `ncu -i REP --page source --csv --print-source sass` (scripts/ncu_source.py's input;
results/h200/issue27/ncu_job.sh writes one per side). SHORT and LONG index its kernel tables
(0-based, in profile order; a table ncu prints twice in a row counts once); N_SHORT and N_LONG are
the tiles a block runs in each. With s = blocks x (F + n T) per instruction:
F = (N_LONG s_short - N_SHORT s_long) / (N_LONG - N_SHORT) and T = (s_long - s_short) /
(N_LONG - N_SHORT), both in the profile's samples for all its blocks. The summary gives sum F /
sum T, the fixed cost in tiles, in raw samples: a sample interval takes one sample from each SM
sub-partition with a warp, so a wait by warps of one sub-partition (e.g. one signal thread's)
counts once an interval where a tile's work counts about four times."""
import argparse
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402
from scripts.ncu_source import blocks, num, read_page, source_column  # noqa: E402


def fail(msg):
    print(f"ncu_fixed_cost.py: {msg}", file=sys.stderr)
    sys.exit(2)


def tables(path):
    """The source page's kernel tables, each once: [(title, header, rows)]."""
    try:
        text = read_page(path)
    except OSError as e:
        fail(f"{path}: {e.strerror or e}")
    out = []
    for t in blocks(io.StringIO(text)):
        if out and out[-1][1] == t[1] and out[-1][2] == t[2]:
            continue  # the same table printed again
        out.append(t)
    return out


def parse_pair(text):
    parts = text.split(":")
    try:
        if len(parts) != 4:
            raise ValueError
        a, b, na, nb = int(parts[0]), int(parts[1]), float(parts[2]), float(parts[3])
    except ValueError:
        fail(f"--pair '{text}': expected SHORT:LONG:N_SHORT:N_LONG (two table indices, two tile counts)")
    if na <= 0 or nb <= na:
        fail(f"--pair '{text}': the tile counts must satisfy 0 < N_SHORT < N_LONG")
    return a, b, na, nb


def column(header, match, what):
    low = [h.lower() for h in header]
    col = next((i for i, h in enumerate(low) if match(h)), None)
    if col is None:
        fail(f"no {what} column; the header is: {' | '.join(header)}")
    return col


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--pair", action="append", required=True, metavar="SHORT:LONG:N_SHORT:N_LONG")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    pairs = [parse_pair(p) for p in a.pair]
    tabs = tables(a.csv)
    if not tabs:
        fail(f"no instruction table in {a.csv}")
    for i, j, ni, nj in pairs:
        for k in (i, j):
            if not 0 <= k < len(tabs):
                fail(f"--pair {i}:{j}: table {k} does not exist ({len(tabs)} tables in {a.csv})")
        (title, header, short), (_, header_l, long_) = tabs[i], tabs[j]
        if len(short) != len(long_) or header != header_l:
            fail(f"--pair {i}:{j}: not the same kernel ({len(short)} and {len(long_)} instructions)")
        samples = column(header, lambda h: "stall sampling (all" in h, "warp stall sampling (all samples)")
        src = source_column(header)
        for k, rows in ((i, short), (j, long_)):
            bad = next((r for r in rows if len(r) <= max(samples, src)), None)
            if bad is not None:
                fail(f"table {k}: a row of {len(bad)} fields where the header has {len(header)}: {bad[:3]}")
        span = nj - ni
        fixed, tile = [], []
        for rs, rl in zip(short, long_):
            s, l = num(rs[samples]), num(rl[samples])
            fixed.append((nj * s - ni * l) / span)
            tile.append((l - s) / span)
        total_f, total_t = sum(fixed), sum(tile)
        ratio = f"{total_f / total_t:.2f} tiles" if total_t > 0 else "-"
        print(f"== tables {i} and {j} ({ni:g} and {nj:g} tiles a block): {title}")
        print(f"  fixed samples {total_f:,.0f}, per tile {total_t:,.0f}: the fixed cost is {ratio} (raw samples)")
        base = int(short[0][0], 16) if short and short[0][0].startswith("0x") else None
        print(f"  top {a.top} by fixed samples:")
        for k in sorted(range(len(fixed)), key=lambda k: -fixed[k])[:a.top]:
            r = short[k]
            where = f"+{int(r[0], 16) - base:#07x}" if base is not None and r[0].startswith("0x") else r[0]
            share = f"{100 * fixed[k] / total_f:5.1f}%" if total_f > 0 else "  -  "
            print(f"    {share} {fixed[k]:>10,.0f}  per tile {tile[k]:>8,.1f}  {where:>9}  {r[src].strip()[:80]}")
    return 0


if __name__ == "__main__":
    run(main)
