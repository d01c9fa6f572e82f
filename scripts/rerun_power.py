#!/usr/bin/env python3
"""How many rerun rounds `attnbench compare --rerun-rows all` needs on this machine's noise.

    python3 scripts/rerun_power.py OUT [--slow-impl cpu.flash_fwd] [--rounds 10,20,40] [--trials 2000]

OUT is a gate_figures.py folder with `--kinds one --variants rerun-all` comparisons
(compare-one-rerun-all-*.json). Their rounds' NEW/BASE ratios are the noise as measured: those of
the slowed implementation (a real slowdown, ATTNBENCH_TEST_SLOWDOWN) and those of the others
(none). For each round count R it draws R rounds per row with replacement (a bootstrap), tests each
row as compare does (one-sided Wilcoxon signed-rank, exact; Holm over the rows at alpha), and
prints how often the slowed row is caught and how many other rows are flagged per comparison.
"""
import argparse
import glob
import json
import math
import os
import random
import statistics
import sys
from functools import lru_cache

if not __package__:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402


@lru_cache(None)
def counts(n):
    """Number of sign assignments of ranks 1..n with each rank sum W+."""
    c = [0] * (n * (n + 1) // 2 + 1)
    c[0] = 1
    for k in range(1, n + 1):
        for w in range(len(c) - 1, k - 1, -1):
            c[w] += c[w - k]
    return c


def p_greater(xs):
    """One-sided exact signed-rank p of 'xs above 0' (no ties in practice: continuous ratios)."""
    n = len(xs)
    order = sorted(range(n), key=lambda i: abs(xs[i]))
    w = sum(r + 1 for r, i in enumerate(order) if xs[i] > 0)
    c = counts(n)
    return sum(c[w:]) / 2 ** n


def holm(ps, alpha):
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    flagged = set()
    for k, i in enumerate(order):
        if ps[i] > alpha / (len(ps) - k):
            break
        flagged.add(i)
    return flagged


def mad(xs):
    m = statistics.median(xs)
    return 1.4826 * statistics.median(abs(x - m) for x in xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    # Comparisons made before the naming scheme (results/gate/*2026-12-0[12]*) name it cpu.flash_1pass.
    ap.add_argument("--slow-impl", default="cpu.flash_fwd")
    ap.add_argument("--rounds", default="10,20,30,40,50,60")
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    slow, null, rows = [], [], 0
    files = sorted(glob.glob(os.path.join(a.out, "compare-one-rerun-all-*.json")))
    if not files:
        sys.exit(f"rerun_power: no compare-one-rerun-all-*.json in {a.out}")
    for f in files:
        with open(f) as fh:
            rep = json.load(fh)
        n = 0
        for r in rep["rows"]:
            rr = (r.get("rerun") or {}).get("round_ratios")
            if not rr:
                continue
            n += 1
            (slow if r["impl"] == a.slow_impl else null).extend(math.log(x) for x in rr)
        rows = max(rows, n)
    if not slow or not null:
        sys.exit("rerun_power: the comparisons hold no rounds of the slowed or of the other rows")
    print(f"{len(files)} comparisons, {rows} rows each; rounds of {a.slow_impl}: {len(slow)}, "
          f"median x{math.exp(statistics.median(slow)):.3f}, above 1 in {sum(x > 0 for x in slow) / len(slow):.0%}; "
          f"other rows' rounds: {len(null)}, log-ratio MAD {mad(null):.3f}, SD {statistics.pstdev(null):.3f}")
    rng = random.Random(a.seed)
    print("| rounds | slowed row caught | P(10 of 10 caught) | other rows flagged per comparison |")
    print("|---|---|---|---|")
    for r_ in (int(x) for x in a.rounds.split(",")):
        caught = other = 0
        for _ in range(a.trials):
            ps = [p_greater(rng.choices(slow, k=r_))] + [p_greater(rng.choices(null, k=r_)) for _ in range(rows - 1)]
            f = holm(ps, a.alpha)
            caught += 0 in f
            other += len(f - {0})
        c = caught / a.trials
        print(f"| {r_} | {c:.3f} | {c ** 10:.3f} | {other / a.trials:.3f} |")
    return 0


if __name__ == "__main__":
    run(main)
