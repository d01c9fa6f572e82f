#!/usr/bin/env python3
"""The regression gate's figures (issue 18): false regressions over identical pairs of runs, and
how often a controlled slowdown is caught, measured on this machine as it is (shared, loaded).

For each pair i = 1..N it runs the config four times with the same binary:

  base-i   the reference
  same-i   identical: any regression `compare` reports is false
  slow-i   every implementation 1.15x slower (ATTNBENCH_TEST_SLOWDOWN='*=1.15')
  one-i    one implementation 1.15x slower (ATTNBENCH_TEST_SLOWDOWN='IMPL=1.15')

then compares base-i with each of the others, each way asked for (--variants):

  plain       attnbench compare BASE NEW
  rerun       ... --rerun BINARY                 (the rows found slower measured again, NEW only)
  rerun-both  ... --rerun BINARY --rerun-base BINARY   (again on both sides, alternating)
  rerun-all   ... --rerun BINARY --rerun-base BINARY --rerun-rows all   (every timed row again)

The slowdown is real time on this machine: the harness spins on the clock after each timed call
of the slowed implementation until the call has taken FACTOR times its own measured duration
(timing.hpp, ATTNBENCH_TEST_SLOWDOWN), so the slowed rows see the machine's noise as any slower
code would. The reruns of a slowed NEW use a wrapper that sets the variable, BASE's reruns the
plain binary. Every run records the load: the context's load averages at its start and end, and
per row the cores other processes kept busy while it was timed (time.others_cores); the summary
prints them beside each pair.

Writes OUT/*.json (runs and compare reports), OUT/summary.json and OUT/summary.md, and prints the
summary. --resume reuses the files already in OUT. The whole of configs/default.json is too
long for 10 pairs here: one CPU run of it took 1 min 46 s on the shared 2-core machine (load
about 10), so 40 runs and the reruns of every row are hours. --case runs a part of it; the
figures in docs/gate_figures.md come from one of its cases (7 timed rows), about 23 minutes on
the quiet machine:

  python3 scripts/gate_figures.py --attnbench build/attnbench --config configs/default.json \
      --case '*_sq256_skv256_d64_*' --out /tmp/gate4 --pairs 10 --variants plain,rerun-all

--load N runs N background loops of the CPU conformance tests (build/tests/test_cpu_impls, by
default, each with OMP_NUM_THREADS=2) for the whole measurement: a machine loaded the same way
each time, in place of other users' builds and tests.
"""
import argparse
import json
import os
import signal
import stat
import subprocess
import sys
import time

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return None


def run_config(exe, config, out, slowdown, extra):
    env = dict(os.environ)
    env.pop("ATTNBENCH_TEST_SLOWDOWN", None)
    if slowdown:
        env["ATTNBENCH_TEST_SLOWDOWN"] = slowdown
    t0 = time.time()
    p = subprocess.run([exe, "run", config, "--quiet", "--out", out] + extra, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode not in (0, 1):
        sys.exit(f"gate_figures: {exe} run {config} exited {p.returncode}:\n{p.stderr}")
    return time.time() - t0


def wrapper(path, exe, slowdown):
    """An executable that runs exe with the slowdown set: the rerun binary of a slowed NEW."""
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\nATTNBENCH_TEST_SLOWDOWN='{slowdown}' exec '{os.path.abspath(exe)}' \"$@\"\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def compare(exe, base, new, out, rerun=None, rerun_base=None, extra=()):
    env = dict(os.environ)
    env.pop("ATTNBENCH_TEST_SLOWDOWN", None)
    cmd = [exe, "compare", base, new, "--format", "json"]
    if rerun:
        cmd += ["--rerun", rerun]
    if rerun_base:
        cmd += ["--rerun-base", rerun_base]
    cmd += list(extra)
    t0 = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode not in (0, 1, 3, 4):  # 3: the whole file shifted, 4: rows missing
        sys.exit(f"gate_figures: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
    report = json.loads(p.stdout)
    report["wall_s"] = time.time() - t0
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    return report


def load_json(path):
    with open(path) as f:
        return json.load(f)


def run_load(path):
    """(load at start, load at end, mean others_cores over the timed rows) of a results file."""
    j = load_json(path)
    ctx = j["context"]
    la = ctx.get("load_average") or [float("nan")]
    le = ctx.get("load_average_end") or [float("nan")]
    oc = [r["time"]["others_cores"] for r in j["rows"] if "time" in r and r["time"].get("others_cores") is not None]
    return la[0], le[0], (sum(oc) / len(oc) if oc else float("nan"))


def flagged(report):
    return [r for r in report["rows"] if r["verdict"] == "regressed"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attnbench", default="build/attnbench")
    ap.add_argument("--config", default="configs/default.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--factor", type=float, default=1.15)
    ap.add_argument("--slow-impl", default="cpu.flash_fwd",
                    help="the implementation slowed alone (cpu.flash_1pass in runs before the rename)")
    ap.add_argument("--variants", default="plain,rerun-all",
                    help="comma-separated: plain, rerun, rerun-both, rerun-all")
    ap.add_argument("--rerun-rounds", type=int, default=0,
                    help="compare --rerun-rounds (default 0: compare's own choice, enough rounds for its test)")
    ap.add_argument("--rerun-repetitions", type=int, default=5, help="compare --rerun-repetitions")
    ap.add_argument("--kinds", default="same,slow,one", help="comma-separated: same, slow, one")
    ap.add_argument("--case", action="append", default=[],
                    help="only the cases matching this glob (attnbench run --case), repeatable: a "
                         "smaller run of the config where the whole one takes too long")
    ap.add_argument("--resume", action="store_true", help="reuse the files already in OUT")
    ap.add_argument("--load", type=int, default=0,
                    help="background loops of --load-cmd during the whole measurement (default 0)")
    ap.add_argument("--load-cmd", default=None,
                    help="the command each loop runs (default: test_cpu_impls of --attnbench's build)")
    a = ap.parse_args()
    exe = os.path.abspath(a.attnbench)
    if a.load < 0:
        sys.exit(f"gate_figures: --load must be >= 0, got {a.load}")
    load_cmd = a.load_cmd or os.path.join(os.path.dirname(exe), "tests", "test_cpu_impls")
    loops = []
    if a.load:
        if not a.load_cmd and not os.access(load_cmd, os.X_OK):
            sys.exit(f"gate_figures: --load: {load_cmd} is not built (give --load-cmd)")
        env = dict(os.environ, OMP_NUM_THREADS="2")
        env.pop("ATTNBENCH_TEST_SLOWDOWN", None)
        for _ in range(a.load):
            loops.append(subprocess.Popen(["sh", "-c", f"while :; do {load_cmd}; done"], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
    try:
        measure(a, exe, load_cmd)
    finally:
        for p in loops:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            p.wait()


def measure(a, exe, load_cmd):
    os.makedirs(a.out, exist_ok=True)
    variants = a.variants.split(",")
    kinds = a.kinds.split(",")
    slowdowns = {"same": None, "slow": f"*={a.factor}", "one": f"{a.slow_impl}={a.factor}"}
    wrappers = {k: wrapper(os.path.join(a.out, f"attnbench-{k}"), exe, s) for k, s in slowdowns.items() if s}
    wrappers["same"] = exe

    pairs = []
    for i in range(1, a.pairs + 1):
        pair = {"pair": i, "runs": {}, "compare": {}}
        for kind in ["base"] + kinds:
            path = os.path.join(a.out, f"{kind}-{i}.json")
            if not (a.resume and os.path.exists(path)):
                before = loadavg()
                wall = run_config(exe, a.config, path, slowdowns.get(kind),
                                  [x for c in a.case for x in ("--case", c)])
                print(f"[pair {i}] {kind}: {wall:.0f} s, load {before[0] if before else '?'}", file=sys.stderr, flush=True)
            la, le, oc = run_load(path)
            pair["runs"][kind] = {"file": path, "load_start": la, "load_end": le, "others_cores": oc}
        base = pair["runs"]["base"]["file"]
        for kind in kinds:
            new = pair["runs"][kind]["file"]
            for v in variants:
                path = os.path.join(a.out, f"compare-{kind}-{v}-{i}.json")
                if a.resume and os.path.exists(path):
                    rep = load_json(path)
                else:
                    rerun = wrappers[kind] if v in ("rerun", "rerun-both", "rerun-all") else None
                    rerun_base = exe if v in ("rerun-both", "rerun-all") else None
                    extra = ["--rerun-rows", "all"] if v == "rerun-all" else []
                    if rerun:
                        extra += ["--rerun-rounds", str(a.rerun_rounds), "--rerun-repetitions",
                                  str(a.rerun_repetitions)]
                    rep = compare(exe, base, new, path, rerun, rerun_base, extra)
                    print(f"[pair {i}] compare {kind} {v}: exit {rep['summary']['exit_code']}, "
                          f"{len(flagged(rep))} rows regressed, {rep['wall_s']:.0f} s", file=sys.stderr, flush=True)
                rows = flagged(rep)
                timed = [r for r in rep["rows"] if r["rule"] != "untimed"]
                slowed = [r for r in timed if kind == "slow" or (kind == "one" and r["impl"] == a.slow_impl)]
                pair["compare"][f"{kind}/{v}"] = {
                    "exit": rep["summary"]["exit_code"],
                    "shifted": rep["summary"].get("shifted", 0),
                    "suspect": rep["summary"].get("suspect", 0),
                    "regressed": len(rows),
                    "regressed_slowed": sum(1 for r in rows if kind != "same" and r in slowed),
                    "regressed_other": sum(1 for r in rows if r not in slowed),
                    "slowed_rows": len(slowed),
                    "timed_rows": len(timed),
                    "rerun": rep["summary"]["rerun"],
                    "wall_s": rep.get("wall_s"),
                    "method": rep["method"],
                }
        pairs.append(pair)
        with open(os.path.join(a.out, "summary.json"), "w") as f:
            json.dump({"config": a.config, "factor": a.factor, "slow_impl": a.slow_impl,
                       "load": a.load, "load_cmd": load_cmd if a.load else None, "pairs": pairs}, f, indent=1)

    # The summary: per pair, then the totals.
    cases = "".join(f" --case '{c}'" for c in a.case)
    lines = [f"# Regression gate figures: {a.config}{cases}, {len(pairs)} pairs, slowdown x{a.factor} "
             f"(uniform, and {a.slow_impl} alone)" +
             (f"; background load: {a.load} loops of {load_cmd}" if a.load else ""), ""]
    cols = [f"{k}/{v}" for k in kinds for v in variants]
    lines.append("| pair | load 1-min (start-end, per run) | others' cores (mean over rows) | " + " | ".join(cols) + " |")
    lines.append("|---|---|---|" + "---|" * len(cols))
    for p in pairs:
        load = ", ".join(f"{k} {r['load_start']:.1f}-{r['load_end']:.1f}" for k, r in p["runs"].items())
        oc = ", ".join(f"{k} {r['others_cores']:.2f}" for k, r in p["runs"].items())
        cells = []
        for c in cols:
            r = p["compare"][c]
            if c.startswith("same/"):
                cells.append(("ok" if r["exit"] == 0 else
                              "SHIFTED (exit 3)" if r["exit"] == 3 else f"FALSE (exit {r['exit']}, {r['regressed']} row{'' if r['regressed'] == 1 else 's'})") +
                             (f", {r.get('suspect', 0)} suspect" if r.get("suspect") else ""))
            else:
                shifted = r.get("shifted", 0) > 0
                cells.append(("caught" if r["regressed_slowed"] > 0 or shifted else "MISSED") +
                             (" (SHIFTED)" if shifted else "") +
                             f" {r['regressed_slowed']}/{r['slowed_rows']}" +
                             (f", {r['regressed_other']} other" if r["regressed_other"] else ""))
        lines.append(f"| {p['pair']} | {load} | {oc} | " + " | ".join(cells) + " |")
    lines.append("")
    for c in cols:
        rs = [p["compare"][c] for p in pairs]
        if c.startswith("same/"):
            lines.append(f"- identical pairs, {c.split('/')[1]}: exit 1 (a regression) in "
                         f"{sum(r['exit'] == 1 for r in rs)}/{len(rs)} ({sum(r['regressed'] for r in rs)} rows "
                         f"in all); exit 3 (whole file shifted) in {sum(r['exit'] == 3 for r in rs)}/{len(rs)}; "
                         f"not OK in {sum(r['exit'] != 0 for r in rs)}/{len(rs)}; "
                         f"{sum(r.get('suspect', 0) for r in rs)} rows SUSPECT in all")
        else:
            caught = sum(r["regressed_slowed"] > 0 or r.get("shifted", 0) > 0 for r in rs)
            rows = sum(r["regressed_slowed"] for r in rs)
            total = sum(r["slowed_rows"] for r in rs)
            other = sum(r["regressed_other"] for r in rs)
            what = "uniform slowdown" if c.startswith("slow/") else f"{a.slow_impl} slowed"
            lines.append(f"- {what}, {c.split('/')[1]}: caught {caught}/{len(rs)}; slowed rows flagged "
                         f"{rows}/{total}; rows of other implementations flagged: {other}")
    for v in variants:
        c = f"{kinds[0]}/{v}"
        m = pairs[0]["compare"][c]["method"] if pairs else None
        if not m:
            continue
        text = (f"{m['test']}, {m['correction']} at alpha {m['alpha']} over the rows tested, and new/base "
                f"above {1 + m['threshold']:.2f}")
        if m.get("rerun"):
            which = {"all": "every timed row", "suspect": "the rows above the threshold"}.get(
                m.get("rerun_rows"), "the rows found slower")
            text += (f"; rerun of {which}, {m['rerun_rounds']} rounds of one invocation a side per implementation "
                     f"({m['rerun_repetitions']} repetitions each" +
                     (", BASE and NEW alternating)" if m.get("rerun_base") else ", NEW only)"))
            if m.get("rerun_test"):
                text += f" decided by {m['rerun_test']}"
        lines.append(f"- method ({v}): {text}")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    run(main)
