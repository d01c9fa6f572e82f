#!/usr/bin/env python3
"""The per-row speed of NEW against BASE from interleaved runs of both (scripts/gpu_ab.sh).

    scripts/ab_summary.py --base B1.json [B2.json ...] --new N1.json [N2.json ...] [--out FILE.md]
                          [--tolerance 0.02]

Rows are matched on (case, implementation, pass, options; a former implementation name maps
to its current one through --alias OLD=NEW). A row counts when it passed with a time in every
file. Its time on each side is the median of the files' medians, its ratio NEW / BASE (above 1:
NEW is slower). The noise between runs of the same build is measured too: for each side with two
or more files, the ratio of its last file to its first, row by row. Prints (and writes to --out)
a markdown report: per implementation and pass, the rows' ratios (median, min, max, how many are
within the tolerance) beside the same figures for BASE against BASE and NEW against NEW, then
every row. Exit 0; 2 on a bad file or argument.
"""
import argparse
import math
import os
import statistics
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402
from scripts.results_io import emit_report, load_results  # noqa: E402


def fail(msg):
    print(f"ab_summary.py: {msg}", file=sys.stderr)
    sys.exit(2)


def row_options(r):
    opts = r.get("options", r.get("params")) or {}
    return ",".join(f"{k}={opts[k]}" for k in sorted(opts))


def times(path, aliases):
    """{(case, impl, pass, options): median_ms} of the passed, timed rows of one file."""
    res = load_results(path, fail)
    out = {}
    for r in res["rows"]:
        t = r.get("time") or {}
        m = t.get("median_ms")
        if r.get("status") != "pass" or not isinstance(m, (int, float)) or not m > 0:
            continue
        impl = aliases.get(r.get("impl"), r.get("impl"))
        out[(r.get("case"), impl, r.get("pass"), row_options(r))] = float(m)
    return out


def side(files, aliases):
    runs = [times(f, aliases) for f in files]
    keys = set(runs[0])
    for r in runs[1:]:
        keys &= set(r)
    med = {k: statistics.median(r[k] for r in runs) for k in keys}
    drift = {k: runs[-1][k] / runs[0][k] for k in keys} if len(runs) > 1 else {}
    return med, drift


def stats(ratios, tol):
    if not ratios:
        return "-", "-", "-", "-"
    inside = sum(1 for x in ratios if abs(math.log(x)) <= math.log1p(tol))
    return (f"{statistics.median(ratios):.3f}", f"{min(ratios):.3f}", f"{max(ratios):.3f}",
            f"{inside}/{len(ratios)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", nargs="+", required=True, help="BASE's results files")
    ap.add_argument("--new", nargs="+", required=True, help="NEW's results files")
    ap.add_argument("--tolerance", type=float, default=0.02, help="relative, default 0.02")
    ap.add_argument("--alias", action="append", default=[], metavar="OLD=NEW",
                    help="an implementation's former name in BASE's files")
    ap.add_argument("--out", help="also write the report here (markdown)")
    a = ap.parse_args()
    if not 0 < a.tolerance < 1:
        fail(f"--tolerance {a.tolerance}: must be in (0, 1)")
    aliases = {}
    for s in a.alias:
        old, sep, new = s.partition("=")
        if not sep or not old or not new:
            fail(f"--alias '{s}': expected OLD=NEW")
        aliases[old] = new
    bmed, bdrift = side(a.base, aliases)
    nmed, ndrift = side(a.new, aliases)
    keys = sorted(set(bmed) & set(nmed))
    if not keys:
        fail("no row passed with a time in every file of both sides")
    groups = sorted({(k[1], k[2]) for k in keys})
    lines = [f"# NEW against BASE: {len(keys)} rows, {len(a.base)} BASE and {len(a.new)} NEW runs",
             "",
             f"Ratio = NEW time / BASE time (above 1: NEW is slower); 'inside' = within "
             f"±{a.tolerance:.0%}. BASE/BASE and NEW/NEW: the last run of a side against its first, "
             "the noise between runs of one build.", "",
             "| implementation | pass | rows | NEW/BASE median | min | max | inside | "
             "BASE/BASE median | min | max | NEW/NEW median | min | max |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for impl, pas in groups:
        ks = [k for k in keys if k[1] == impl and k[2] == pas]
        r = stats([nmed[k] / bmed[k] for k in ks], a.tolerance)
        b = stats([bdrift[k] for k in ks if k in bdrift], a.tolerance)
        n = stats([ndrift[k] for k in ks if k in ndrift], a.tolerance)
        lines.append(f"| {impl} | {pas} | {len(ks)} | " + " | ".join(r) + " | " +
                     " | ".join(b[:3]) + " | " + " | ".join(n[:3]) + " |")
    allr = [nmed[k] / bmed[k] for k in keys]
    lines += ["", f"All rows: NEW/BASE median {statistics.median(allr):.4f}, "
              f"{stats(allr, a.tolerance)[3]} inside ±{a.tolerance:.0%}.", "",
              "| case | implementation | pass | options | BASE ms | NEW ms | NEW/BASE |",
              "|---|---|---|---|---|---|---|"]
    for k in keys:
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3] or '-'} | {bmed[k]:.4f} | "
                     f"{nmed[k]:.4f} | {nmed[k] / bmed[k]:.3f} |")
    emit_report("\n".join(lines) + "\n", a.out)
    return 0


if __name__ == "__main__":
    run(main)
