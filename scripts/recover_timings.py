#!/usr/bin/env python3
"""Put back the timings of a run that was killed during its timing phase.

    python3 scripts/recover_timings.py RUN.json [--log CONSOLE.log] [--from OTHER.json ...] \
        --out RECOVERED.json [--note TEXT]

Before revision 2026-11-29 (runner: "each row's time is written as soon as it is measured"),
attnbench wrote the timings into the results file only at the end of the timing phase, so a run
stopped there (the GPU machine's per-call time limit, a kill, or Google Benchmark's debug-build
abort on an interrupt in the middle of a repetition) kept its verdicts and lost its times. This
script recovers what was measured, and marks every recovered time with where it came from:

  --log   the run's own console output (stdout). Google Benchmark printed, per row, the median
          and the cv over the repetitions, at 3 significant figures: time.median_ms and time.cv
          come from there, time.source is "console log (3 significant figures)", min_ms and
          mean_ms are left out (readers take the median for them).
  --from  another results file of the same config and binary (a later run of the rows the
          first one did not reach): rows are matched on "nvtx"; its full time record is copied,
          with time.source naming the file and its date. Only rows that passed verification in
          both runs are taken. RUN.json's verdict stays.

TFLOP/s is recomputed from the row's FLOPs and the recovered median. context.timing_recovery
records the sources, how many rows each gave, and --note. complete stays false.

Exit codes: 0 written, 1 nothing recovered, 2 bad input.
"""
import argparse
import os
import re
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402
from scripts.results_io import load_results, write_atomic  # noqa: E402

UNITS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
LINE = re.compile(r"^(?P<name>\S+?)/min_time:[0-9.]+/repeats:(?P<reps>\d+)/manual_time_(?P<agg>median|cv)\s+"
                  r"(?P<val>[0-9.eE+-]+)\s*(?P<unit>ns|us|ms|s|%)\s")


def fail(msg, code=2):
    print(f"recover_timings.py: {msg}", file=sys.stderr)
    sys.exit(code)


def parse_log(path):
    """{nvtx name: {"median_ms": x, "cv": y, "repetitions": n}} from Google Benchmark's console lines."""
    out = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            e = out.setdefault(m["name"], {"repetitions": int(m["reps"])})
            v = float(m["val"])
            if m["agg"] == "median":
                if m["unit"] == "%":
                    continue
                e["median_ms"] = v * UNITS[m["unit"]]
            else:
                e["cv"] = v / 100.0 if m["unit"] == "%" else v
    return {k: v for k, v in out.items() if "median_ms" in v}


def set_time(row, time):
    row["time"] = time
    if row.get("flops") and time.get("median_ms", 0) > 0:
        row["tflops"] = row["flops"] / (time["median_ms"] * 1e-3) / 1e12
    if row.get("reason", "").startswith("not timed"):
        row["reason"] = ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[1:]))
    ap.add_argument("run", help="the results file whose timings were lost")
    ap.add_argument("--log", help="that run's console output (stdout)")
    ap.add_argument("--from", dest="others", action="append", default=[], help="a later results file of the same config")
    ap.add_argument("--out", required=True)
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    if not args.log and not args.others:
        fail("give --log and/or --from")
    res = load_results(args.run, fail, "RUN")
    rows = {r.get("nvtx"): r for r in res["rows"] if r.get("status") == "pass" and r.get("nvtx")}
    sources = []
    hot = bool(res.get("context", {}).get("config", {}).get("timing", {}).get("hot", False))
    if args.log:
        got = parse_log(args.log)
        n = 0
        for name, t in got.items():
            r = rows.get(name)
            if r is None or r.get("time"):
                continue
            set_time(r, {"median_ms": t["median_ms"], "cv": t.get("cv", 0.0), "repetitions": t["repetitions"],
                         "hot": hot, "source": "console log (3 significant figures)"})
            n += 1
        sources.append({"source": os.path.basename(args.log), "kind": "console log", "rows": n})
    for path in args.others:
        other = load_results(path, fail, "--from")
        date = other.get("context", {}).get("date", "?")
        n = 0
        for o in other["rows"]:
            r = rows.get(o.get("nvtx"))
            if r is None or r.get("time") or o.get("status") != "pass" or not o.get("time"):
                continue
            t = dict(o["time"])
            t["source"] = f"{os.path.basename(path)} ({date})"
            set_time(r, t)
            n += 1
        sources.append({"source": os.path.basename(path), "kind": "results file", "date": date, "rows": n,
                        "git_revision": other.get("context", {}).get("git_revision")})
    total = sum(s["rows"] for s in sources)
    if total == 0:
        fail("no row recovered a time", 1)
    res["complete"] = False
    # "run in progress": files from before the runs said "unfinished: ..." while going.
    why = res.get("stop_reason", "")
    if why in ("", "run in progress") or why.startswith("unfinished:"):
        res["stop_reason"] = "stopped during its timing phase; times recovered (context.timing_recovery)"
    res.setdefault("context", {})["timing_recovery"] = {
        "sources": sources, "note": args.note,
        "untimed_passing_rows": sum(1 for r in rows.values() if not r.get("time")),
    }
    write_atomic(args.out, res)
    print(f"recover_timings.py: {total} rows timed again ("
          + ", ".join(f"{s['rows']} from {s['source']}" for s in sources) + f") -> {args.out}; "
          f"{res['context']['timing_recovery']['untimed_passing_rows']} passing rows still untimed")
    return 0


if __name__ == "__main__":
    run(main)
