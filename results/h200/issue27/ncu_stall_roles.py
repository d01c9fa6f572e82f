#!/usr/bin/env python3
"""Stall reasons of one kernel's main loop apart from the rest of the kernel, from the source-level
csv that results/h200/issue27/ncu_job.sh writes (`ncu --import R --page source --csv`, gzipped).

ncu's per-kernel stall counters mix every warp: in a warp-specialised kernel the producer's idle
waits (its TMA thread at an mbarrier, the dQ writer warps at a named barrier) land in "barrier" and
"long scoreboard" beside the consumers' real stalls. Here the lines of the consumers' loop are
told apart by how often they ran: each line of the loop body runs once per consumer warp and
iteration, the same count for all of them (--loop-exec, or the largest count that at least 50
lines share: a spin loop's few lines run more often, the prologue's many lines less).

  ncu_stall_roles.py SOURCE.csv.gz --kernel flash_bwd_wgmma_kernel [--index 0] [--loop-exec N]
                     [--lines REASON] [--top 6] [--ops]

--lines stall_barrier: the loop lines with most samples of that reason, with the lines before
them (a stall is sampled on the instruction that waits to issue, after a BAR or DEPBAR);
--ops: the loop's opcodes by static count and their share of the loop's samples.
"""
import argparse
import collections
import gzip
import io
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)
from scripts.ncu_source import blocks  # noqa: E402  (the csv's kernel tables)


def num(s):
    s = s.replace(",", "").strip()
    return int(s) if s.isdigit() else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="the kernel's source-level csv (.csv.gz) from ncu_job.sh")
    ap.add_argument("--kernel", required=True, help="a substring of the kernel's name")
    ap.add_argument("--index", type=int, default=0,
                    help="which matching kernel, in the csv's order (default 0)")
    ap.add_argument("--loop-exec", type=int, default=0,
                    help="executions of each loop line (default: found from the counts)")
    ap.add_argument("--lines", metavar="REASON", help="print the loop lines with most samples of "
                    "this stall column (e.g. stall_barrier)")
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--ops", action="store_true", help="the loop's opcodes and their samples")
    a = ap.parse_args()
    opener = gzip.open if a.csv.endswith(".gz") else open
    with opener(a.csv, "rt", errors="replace") as f:
        text = f.read()
    ks = [{"name": t, "header": h, "rows": r}
          for t, h, r in blocks(io.StringIO(text)) if a.kernel in t]
    if not ks:
        sys.exit(f"ncu_stall_roles.py: no kernel matching '{a.kernel}' in {a.csv}")
    if not 0 <= a.index < len(ks):
        sys.exit(f"ncu_stall_roles.py: --index {a.index}: {len(ks)} kernels match '{a.kernel}'")
    k = ks[a.index]
    h, rows = k["header"], k["rows"]
    ie = h.index("Instructions Executed")
    reasons = [c for c in h if c.startswith("stall_") and "Not Issued" not in c]
    ri = {c: h.index(c) for c in reasons}
    loop = a.loop_exec
    if not loop:
        counts = collections.Counter(num(r[ie]) for r in rows if num(r[ie]) > 0)
        shared = [c for c in counts if counts[c] >= 50] or list(counts)
        loop = max(shared)
    is_loop = [num(r[ie]) == loop for r in rows]
    agg = {"loop": collections.Counter(), "rest": collections.Counter()}
    for r, lp in zip(rows, is_loop):
        for c in reasons:
            agg["loop" if lp else "rest"][c] += num(r[ri[c]])
    print(f"{k['name'][:140]}")
    print(f"loop: {sum(is_loop)} lines run {loop} times each")
    for role, cn in agg.items():
        t = sum(cn.values()) or 1
        top = ", ".join(f"{c[6:]} {100 * v / t:.1f}%" for c, v in cn.most_common(9))
        print(f"  {role}: {sum(cn.values())} samples: {top}")
    total_loop = sum(agg["loop"].values()) or 1
    if a.ops:
        ops, st = collections.Counter(), collections.defaultdict(collections.Counter)
        for r, lp in zip(rows, is_loop):
            if not lp:
                continue
            m = re.match(r"(@!?U?P\w+\s+)?([A-Z0-9_]+)", r[1].strip())
            op = m.group(2) if m else r[1].strip()
            ops[op] += 1
            for c in reasons:
                st[op][c] += num(r[ri[c]])
        print("  opcode      lines  loop samples  (top reasons)")
        for op, n in ops.most_common(16):
            s = sum(st[op].values())
            top = ", ".join(f"{c[6:]} {100 * v / total_loop:.1f}" for c, v in st[op].most_common(3))
            print(f"  {op:10s} {n:6d}  {100 * s / total_loop:6.1f}%  ({top})")
    if a.lines:
        if a.lines not in ri:
            sys.exit(f"ncu_stall_roles.py: no column '{a.lines}' (columns: {', '.join(reasons)})")
        idx = [i for i, lp in enumerate(is_loop) if lp]
        for i in sorted(idx, key=lambda i: -num(rows[i][ri[a.lines]]))[:a.top]:
            share = 100 * num(rows[i][ri[a.lines]]) / total_loop
            print(f"  --- {share:.1f}% of the loop's samples")
            for j in range(max(0, i - 5), i + 1):
                print(("  >> " if j == i else "     ") + rows[j][1].strip()[:100])


if __name__ == "__main__":
    main()
