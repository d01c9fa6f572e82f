#!/usr/bin/env python3
"""HBM traffic per implementation and pass, measured by Nsight Compute, merged into a results file.

    python3 scripts/ncu_hbm.py CONFIG.json --attnbench build-gpu/attnbench --results RUN.json \
        --out MERGED.json [--impl GLOB ...] [--case GLOB ...] [--keep-report DIR] [--ncu PATH]
    python3 scripts/ncu_hbm.py --parse-csv NCU.csv --results RUN.json --out MERGED.json

What it does:
 1. Runs `attnbench run CONFIG --profile --verify off` under ncu: one call per row (no timing
    loop), every kernel profiled with the metrics dram__bytes_read.sum and dram__bytes_write.sum,
    `--clock-control none` (the clocks are left alone) and ncu's default cache control (caches
    flushed before each kernel, so every kernel starts cold, as in the papers' counts).
 2. Attributes each kernel to the innermost NVTX push/pop range of attnbench's domain around it
    (`--nvtx --print-nvtx-rename kernel`: the kernel is reported as "<range>/<kernel>"). The
    harness opens one range per call, named `<impl>[+opt=val]:<case>:<pass>`, which is the row's
    "nvtx" field. Kernels outside a call range (a backward row's forward, run beforehand to give
    it O and LSE) carry the case's range name and are not counted.
 3. Sums the bytes per range and writes RUN.json's rows with extra.hbm_read_bytes,
    extra.hbm_write_bytes and extra.hbm_kernels (the number of kernels summed) into MERGED.json;
    context.hbm says how they were measured. `attnbench table MERGED.json` then prints an
    "HBM traffic" table.

The config, --impl and --case are checked first with `attnbench expand` (which also says how many
rows will be profiled), so a typo exits 2 before ncu runs.
RUN.json is a normal (timed) run of the same config; rows are matched on "nvtx". A row with no
kernel in the profile keeps no hbm fields (the merge says which). --parse-csv skips step 1 and
reads a CSV that ncu wrote with the flags above (`--csv --page raw --print-units base`).

Exit codes: 0 merged, 1 ncu or attnbench failed or nothing matched, 2 bad input.
"""
import argparse
import csv
import datetime
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402
from scripts.results_io import load_results, write_atomic  # noqa: E402

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
UNIT_SCALE = {"byte": 1.0, "bytes": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
              "KB": 1e3, "MB": 1e6, "GB": 1e9,
              "nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}


def fail(msg, code=2):
    print(f"ncu_hbm.py: {msg}", file=sys.stderr)
    sys.exit(code)


def read_raw_csv(text, metrics):
    """[(id, kernel name, {metric: value in base units})] from ncu's raw CSV page, in order.

    The page has a header row, a units row (with --print-units base: "byte", "nsecond", ...), then
    one row per kernel. Shared by scripts/ncu_kernels.py (kernel durations)."""
    start = text.find('"ID"')
    if start < 0:
        raise ValueError("no CSV header (a line starting with \"ID\") in ncu's output")
    rows = list(csv.reader(io.StringIO(text[start:])))
    header = rows[0]
    try:
        name_col = header.index("Kernel Name")
        cols = {m: header.index(m) for m in metrics}
    except ValueError as e:
        raise ValueError(f"ncu's CSV lacks a column: {e}; header: {header[:12]}...") from None
    scale = {m: 1.0 for m in metrics}
    body = rows[1:]
    if body and not body[0][0].strip().isdigit():  # the units row
        for m, c in cols.items():
            unit = body[0][c].strip()
            if unit and unit not in UNIT_SCALE:
                raise ValueError(f"unknown unit '{unit}' for {m}")
            scale[m] = UNIT_SCALE.get(unit, 1.0)
        body = body[1:]
    out = []
    for r in body:
        if len(r) < len(header):
            continue
        vals = {}
        for m, c in cols.items():
            v = r[c].replace(",", "").strip()
            if v in ("", "n/a", "N/A"):
                raise ValueError(f"kernel {r[0]} '{r[name_col][:80]}': no value for {m}")
            vals[m] = float(v) * scale[m]
        out.append((r[0].strip(), r[name_col], vals))
    return out


def parse_ncu_csv(text):
    """{range name: {"read": bytes, "write": bytes, "kernels": n}} from ncu's raw CSV page, whose
    "Kernel Name" is the NVTX range name under --print-nvtx-rename kernel."""
    sums = {}
    for _, kname, vals in read_raw_csv(text, METRICS):
        # Renamed kernels read "<innermost range>/<kernel name>" (ncu 2025.3); attnbench's range
        # names hold no '/', so the range is everything before the first one.
        name = kname.split("/", 1)[0]
        s = sums.setdefault(name, {"read": 0.0, "write": 0.0, "kernels": 0})
        s["read"] += vals[METRICS[0]]
        s["write"] += vals[METRICS[1]]
        s["kernels"] += 1
    return sums


def merge(res, sums, method):
    matched, missing = 0, []
    for row in res["rows"]:
        name = row.get("nvtx", "")
        if row.get("status") == "skip" or not name:
            continue
        s = sums.get(name)
        if not s:
            missing.append(name)
            continue
        extra = row.get("extra") or {}
        extra["hbm_read_bytes"] = s["read"]
        extra["hbm_write_bytes"] = s["write"]
        extra["hbm_kernels"] = s["kernels"]
        row["extra"] = extra
        matched += 1
    res.setdefault("context", {})["hbm"] = method
    return matched, missing


def expected_rows(args):
    """The rows the profile will have, from `attnbench expand` (config errors and unmatched --case
    globs are reported here, exit 2, before ncu spends any time)."""
    cmd = [args.attnbench, "expand", args.config]
    for g in args.impl or []:
        cmd += ["--impl", g]
    for g in args.case or []:
        cmd += ["--case", g]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        fail(p.stderr.strip() or f"attnbench expand exited {p.returncode}")
    return [r["nvtx"] for line in p.stdout.splitlines() if line.strip() for r in json.loads(line)["rows"]]


def run_ncu(args):
    ncu = args.ncu or shutil.which("ncu")
    if not os.access(args.attnbench, os.X_OK):
        fail(f"--attnbench {args.attnbench}: not an executable")
    rows = expected_rows(args)
    print(f"ncu_hbm.py: {len(rows)} rows to profile (attnbench expand)", flush=True)
    if not ncu:
        fail("ncu (Nsight Compute) not found on PATH; give --ncu PATH", 1)
    work = tempfile.mkdtemp(prefix="ncu_hbm.")
    rep = os.path.join(work, "hbm")
    profile_json = os.path.join(work, "profile.json")
    cmd = [ncu, "--nvtx", "--metrics", ",".join(METRICS), "--clock-control", "none",
           "--export", rep, "--force-overwrite"]
    if args.nvtx_include:
        cmd += ["--nvtx-include", args.nvtx_include]
    cmd += [args.attnbench, "run", args.config, "--profile", "--verify", "off", "--quiet",
            "--out", profile_json]
    for g in args.impl or []:
        cmd += ["--impl", g]
    for g in args.case or []:
        cmd += ["--case", g]
    print("+ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = p.stdout
    if args.keep_report:
        os.makedirs(args.keep_report, exist_ok=True)
        with open(os.path.join(args.keep_report, "ncu_hbm.log"), "w") as f:
            f.write(log)
    if p.returncode not in (0, 1):  # 1: a row failed verification (still profiled)
        print(log[-4000:], file=sys.stderr)
        fail(f"ncu/attnbench exited {p.returncode}", 1)
    if not os.path.exists(rep + ".ncu-rep"):
        print(log[-4000:], file=sys.stderr)
        fail("ncu wrote no report (no kernel profiled?)", 1)
    imp = [ncu, "--import", rep + ".ncu-rep", "--csv", "--page", "raw", "--print-units", "base",
           "--print-nvtx-rename", "kernel", "--metrics", ",".join(METRICS)]
    q = subprocess.run(imp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if q.returncode != 0:
        fail(f"ncu --import failed ({q.returncode}): {q.stderr[-2000:]}", 1)
    if args.keep_report:
        shutil.copy(rep + ".ncu-rep", args.keep_report)
        with open(os.path.join(args.keep_report, "ncu_hbm.csv"), "w") as f:
            f.write(q.stdout)
    version = subprocess.run([ncu, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()
    shutil.rmtree(work, ignore_errors=True)
    return q.stdout, " ".join(cmd), (version[-1] if version else "?")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[1:]))
    ap.add_argument("config", nargs="?", help="attnbench config to profile (step 1)")
    ap.add_argument("--attnbench", default="build-gpu/attnbench", help="the attnbench binary (CUDA build)")
    ap.add_argument("--results", required=True, help="timed run of the same config to merge into")
    ap.add_argument("--out", required=True, help="merged results file (written atomically)")
    ap.add_argument("--impl", action="append", help="only these implementations (attnbench --impl)")
    ap.add_argument("--case", action="append", help="only the cases matching this glob (attnbench --case)")
    ap.add_argument("--ncu", help="the ncu binary (default: ncu on PATH)")
    ap.add_argument("--nvtx-include", help="an ncu --nvtx-include filter (default: every kernel)")
    ap.add_argument("--keep-report", metavar="DIR", help="keep the .ncu-rep, its CSV and the log in DIR")
    ap.add_argument("--parse-csv", metavar="CSV", help="skip profiling: read ncu's raw CSV page from this file")
    args = ap.parse_args()

    res = load_results(args.results, fail, "--results")
    if args.parse_csv:
        try:
            with open(args.parse_csv, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            fail(f"--parse-csv {args.parse_csv}: {e.strerror}")
        cmdline, version = f"(parsed from {args.parse_csv})", "?"
    else:
        if not args.config:
            fail("give CONFIG.json to profile, or --parse-csv")
        if not os.path.isfile(args.config):
            fail(f"config {args.config}: no such file")
        text, cmdline, version = run_ncu(args)
    try:
        sums = parse_ncu_csv(text)
    except ValueError as e:
        fail(f"cannot read ncu's CSV: {e}", 1)
    method = {
        "tool": "Nsight Compute", "version": version, "metrics": list(METRICS),
        "attribution": "innermost NVTX push/pop range (attnbench call range = row nvtx)",
        "command": cmdline, "cache_control": "all (caches flushed before each kernel)",
        "clock_control": "none",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    matched, missing = merge(res, sums, method)
    for m in missing:
        print(f"ncu_hbm.py: no profiled kernel under '{m}': row left without HBM bytes", file=sys.stderr)
    if matched == 0:
        names = ", ".join(list(sums)[:8])
        fail(f"no row matched a profiled range (ranges seen: {names or 'none'})", 1)
    write_atomic(args.out, res)
    print(f"ncu_hbm.py: HBM bytes merged into {matched} rows -> {args.out}")
    for row in res["rows"]:
        e = row.get("extra") or {}
        if "hbm_read_bytes" in e:
            print(f"  {row['impl']:<22} {row['pass']:<8} {row['case']:<44} "
                  f"read {e['hbm_read_bytes'] / 1e9:8.3f} GB  write {e['hbm_write_bytes'] / 1e9:8.3f} GB  "
                  f"({e['hbm_kernels']} kernels)")
    return 0


if __name__ == "__main__":
    run(main)
