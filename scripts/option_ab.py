#!/usr/bin/env python3
"""An option's values against each other, from ONE attnbench run that swept them (a config's
"options": {"IMPL": {"NAME": [0, 1]}}): the A/B of a tuning option without a second build.

    scripts/option_ab.py RESULTS.json --option NAME [--impl IMPL] [--base VALUE] [--peer IMPL ...]
                         [--where NAME=VALUE ...] [--class LABEL=SUBSTRING ...]
                         [--metric tflops|gbps] [--out FILE.md]

Rows: --impl's (default: the one implementation whose rows carry the option) that passed with the
metric (default tflops; gbps for memory-bound rows), by case and the option's value; a row
without the option counts as --base (default 0, the implementations' default). Each other value's
figure is divided by --base's, case by case (above 1: faster than --base). --peer adds another
implementation's figure on the same case and ours / peer for every value. --where keeps only --impl's rows whose
option NAME has VALUE (a row without NAME counts as 0, the default), so that a run sweeping
several options as explicit sets (e.g. [{"a": 0, "b": 0}, {"a": 1, "b": 0}, {"a": 0, "b": 1}])
gives each option's A/B with the others fixed. --class groups the
cases for the summary lines (a case joins the first class whose substring its name contains,
else "other"; default one class, "all"): per class and value, the median, min and max of the
ratios. Prints (and writes to --out) a markdown report. Exit 0; 2 on a bad file or argument, or
when no case has both values.
"""
import argparse
import os
import statistics
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402
from scripts.results_io import emit_report, load_results, output_refusal  # noqa: E402


def fail(msg):
    print(f"option_ab.py: {msg}", file=sys.stderr)
    sys.exit(2)


def number(text, what):
    try:
        v = float(text)
    except ValueError:
        fail(f"{what} '{text}': expected a number")
    return int(v) if v == int(v) else v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results")
    ap.add_argument("--option", required=True)
    ap.add_argument("--impl")
    ap.add_argument("--base", default="0")
    ap.add_argument("--peer", action="append", default=[])
    ap.add_argument("--where", action="append", default=[])
    ap.add_argument("--class", dest="classes", action="append", default=[])
    ap.add_argument("--metric", choices=("tflops", "gbps"), default="tflops")
    ap.add_argument("--out")
    a = ap.parse_args()
    base = number(a.base, "--base")
    classes = []
    for c in a.classes:
        label, sep, sub = c.partition("=")
        if not sep or not label or not sub:
            fail(f"--class '{c}': expected LABEL=SUBSTRING")
        classes.append((label, sub))
    where = []
    for w in a.where:
        name, sep, value = w.partition("=")
        if not sep or not name or not value:
            fail(f"--where '{w}': expected NAME=VALUE")
        if name == a.option:
            fail(f"--where '{w}': that is --option itself")
        where.append((name, number(value, f"--where {name}")))
    if a.out:
        why = output_refusal(a.out, inputs=[a.results])
        if why:
            fail(f"--out {a.out}: {why}")
    res = load_results(a.results, fail)

    passed = [r for r in res["rows"] if r.get("status") == "pass" and r.get(a.metric)]
    impl = a.impl
    if impl is None:
        with_opt = sorted({r["impl"] for r in res["rows"] if a.option in (r.get("options") or {})})
        if len(with_opt) != 1:
            fail(f"--impl needed: rows with option '{a.option}' come from "
                 f"{', '.join(with_opt) if with_opt else 'no implementation'}")
        impl = with_opt[0]
    ours, peers = {}, {}
    for r in passed:
        if r["impl"] == impl:
            opts = r.get("options") or {}
            if any(opts.get(name, 0) != value for name, value in where):
                continue
            v = opts.get(a.option, base)
            ours.setdefault(r["case"], {})[v] = r[a.metric]
        elif r["impl"] in a.peer:
            peers.setdefault(r["case"], {})[r["impl"]] = r[a.metric]
    values = sorted({v for per in ours.values() for v in per})
    others = [v for v in values if v != base]
    cases = sorted(c for c, per in ours.items() if base in per and any(v in per for v in others))
    if not cases:
        fail(f"no case of {impl} passed with {a.option}={base} and another value "
             f"(values seen: {', '.join(map(str, values)) or 'none'})")

    unit = "TFLOP/s" if a.metric == "tflops" else "GB/s"
    fixed = "".join(f", {name}={value}" for name, value in where)
    lines = [f"# {impl}: {a.option} against {a.option}={base}{fixed} ({unit}, one run)", ""]
    head = ["case"] + [f"{a.option}={v}" for v in values]
    head += [f"{v} / {base}" for v in others]
    for p in a.peer:
        head += [p] + [f"{a.option}={v} / {p}" for v in values]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratios = {}
    for c in cases:
        per = ours[c]
        cells = [c] + [f"{per[v]:.1f}" if v in per else "-" for v in values]
        label = next((lab for lab, sub in classes if sub in c), "other" if classes else "all")
        for v in others:
            if v in per:
                ratios.setdefault((label, v), []).append(per[v] / per[base])
                cells.append(f"{per[v] / per[base]:.3f}")
            else:
                cells.append("-")
        for p in a.peer:
            pv = peers.get(c, {}).get(p)
            cells.append(f"{pv:.1f}" if pv else "-")
            cells += [f"{per[v] / pv:.3f}" if pv and v in per else "-" for v in values]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    order = [lab for lab, _ in classes] + ["other", "all"]
    for (label, v), rs in sorted(ratios.items(), key=lambda kv: (order.index(kv[0][0]), str(kv[0][1]))):
        lines.append(f"All rows ({label}): {a.option}={v} / {a.option}={base} median "
                     f"{statistics.median(rs):.3f}, min {min(rs):.3f}, max {max(rs):.3f} "
                     f"({len(rs)} cases)")
    emit_report("\n".join(lines) + "\n", a.out)
    return 0


if __name__ == "__main__":
    run(main)
