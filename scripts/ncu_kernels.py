#!/usr/bin/env python3
"""Which kernels each side runs for the same case, and how long each takes, by Nsight Compute:
the cuDNN comparison (cuda.cudnn_sdpa in attnbench against PyTorch's cuDNN backend).

    python3 scripts/ncu_kernels.py CONFIG.json --case GLOB [--case ...] [--pass fwd] \\
        [--attnbench build-gpu/attnbench] [--impl cuda.cudnn_sdpa] [--torch-backend cudnn] \\
        [--out REPORT.md] [--json OUT.json] [--keep DIR] [--ncu PATH]
    python3 scripts/ncu_kernels.py CONFIG.json --case GLOB --parse-csv SIDE=RAW.csv [--parse-csv ...]

Sides, each one process under `ncu --clock-control none --nvtx --metrics gpu__time_duration.sum`
(ncu's default cache control: caches flushed before every kernel, the same for every side):
  attnbench  `attnbench run CONFIG --impl IMPL --case ... --pass P --profile --verify off`
  capi       scripts/peers/attnbench_impls.py --impl IMPL --profile: the same implementation
             through libattnbench_capi in a PyTorch process (the peers' path)
  torch      scripts/peers/torch_sdpa.py --backend B --profile: PyTorch's SDPA with backend B
In --profile mode each row makes one call inside its NVTX range (the row's "nvtx" name) and
nothing else; the kernels are attributed to the innermost range (an import with
--print-nvtx-rename kernel, joined by ID with one without, which keeps the kernels' names).
The report lists, per case and pass, every kernel of each side with its duration, the sum, and
the TFLOP/s it gives (FLOPs from `attnbench expand`). Same kernel names and durations on both
sides with different timer results: the timers differ; different names: cuDNN picked another
engine for the other graph. --parse-csv reads raw CSVs that ncu wrote with --csv --page raw
--print-units base (twice per side: SIDE=RAW.csv is the renamed import, SIDE=RAW.csv and
RAW.names.csv beside it the plain one; without the second, names are the renamed ones).
Exit codes: 0 written, 1 ncu or a side failed, 2 bad input.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402
from scripts.ncu_hbm import read_raw_csv  # noqa: E402
from scripts.results_io import write_atomic  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
METRIC = "gpu__time_duration.sum"


def fail(msg, code=2):
    print(f"ncu_kernels.py: {msg}", file=sys.stderr)
    sys.exit(code)


def expand(args):
    cmd = [args.attnbench, "expand", args.config, "--pass", ",".join(args.passes)]
    for c in args.case:
        cmd += ["--case", c]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        fail(p.stderr.strip() or f"attnbench expand exited {p.returncode}")
    return [json.loads(x) for x in p.stdout.splitlines() if x.strip()]


def side_commands(args, tmp):
    py, peers = sys.executable, os.path.join(HERE, "peers")
    common = [args.config, "--pass", ",".join(args.passes)] + [x for c in args.case for x in ("--case", c)]
    out = {}
    if args.impl:
        out["attnbench"] = [args.attnbench, "run", *common, "--impl", args.impl, "--profile", "--verify", "off",
                            "--quiet", "--out", os.path.join(tmp, "attnbench.json")]
        out["capi"] = [py, os.path.join(peers, "attnbench_impls.py"), *common, "--impl", args.impl, "--profile",
                       "--attnbench", args.attnbench, "--quiet", "--out", os.path.join(tmp, "capi.json")]
    if args.torch_backend:
        out["torch"] = [py, os.path.join(peers, "torch_sdpa.py"), *common, "--backend", args.torch_backend,
                        "--profile", "--attnbench", args.attnbench, "--quiet", "--out", os.path.join(tmp, "torch.json")]
    return out


def profile(args, side, cmd, tmp):
    """Runs cmd under ncu; returns (renamed CSV text, plain CSV text)."""
    rep = os.path.join(tmp, side)
    full = [args.ncu, "--nvtx", "--metrics", METRIC, "--clock-control", "none", "--export", rep,
            "--force-overwrite", *cmd]
    print("+ " + " ".join(full), flush=True)
    p = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(os.path.join(tmp, side + ".log"), "w", encoding="utf-8") as f:
        f.write(p.stdout)
    if p.returncode not in (0, 1) or not os.path.exists(rep + ".ncu-rep"):
        print(p.stdout[-3000:], file=sys.stderr)
        fail(f"{side}: ncu or the profiled command exited {p.returncode}", 1)
    texts = []
    for rename in (True, False):
        imp = [args.ncu, "--import", rep + ".ncu-rep", "--csv", "--page", "raw", "--print-units", "base",
               "--metrics", METRIC] + (["--print-nvtx-rename", "kernel"] if rename else [])
        q = subprocess.run(imp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if q.returncode != 0:
            fail(f"{side}: ncu --import failed ({q.returncode}): {q.stderr[-1500:]}", 1)
        texts.append(q.stdout)
        with open(os.path.join(tmp, f"{side}{'' if rename else '.names'}.csv"), "w", encoding="utf-8") as f:
            f.write(q.stdout)
    return texts


def kernels(renamed, plain, rows):
    """[(row nvtx or "", kernel name, ns)]: each kernel with the row range it ran in."""
    names = {i: n for i, n, _ in read_raw_csv(plain, [METRIC])} if plain else {}
    out = []
    for i, n, v in read_raw_csv(renamed, [METRIC]):
        row = next((r for r in rows if n == r or n.startswith(r + "/")), "")
        kname = names.get(i) or (n[len(row) + 1:] if row and n.startswith(row + "/") else n)
        out.append((row, kname, v[METRIC]))
    return out


def short(name, n=110):
    return name if len(name) <= n else name[: n - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("--case", action="append", required=True, metavar="GLOB")
    ap.add_argument("--pass", dest="passes", action="append", help="default fwd")
    ap.add_argument("--attnbench", default="build-gpu/attnbench")
    ap.add_argument("--impl", default="cuda.cudnn_sdpa", help="attnbench implementation ('' for none)")
    ap.add_argument("--torch-backend", default="cudnn", help="PyTorch SDPA backend ('' for none)")
    ap.add_argument("--ncu", help="the ncu binary (default: ncu on PATH)")
    ap.add_argument("--out", help="markdown report (default stdout)")
    ap.add_argument("--json", help="every kernel, as JSON")
    ap.add_argument("--keep", metavar="DIR", help="keep the reports, CSVs and logs in DIR")
    ap.add_argument("--parse-csv", action="append", metavar="SIDE=CSV", help="read a side's CSV instead of profiling")
    args = ap.parse_args()
    args.passes = [x for a in (args.passes or ["fwd"]) for x in a.split(",") if x]
    if not os.access(args.attnbench, os.X_OK):
        fail(f"--attnbench {args.attnbench}: not an executable")
    cases = expand(args)
    rows = {}  # side -> [nvtx names]
    for c in cases:
        for ps in args.passes:
            for side, impl in (("attnbench", args.impl), ("capi", "attnbench:" + args.impl),
                               ("torch", f"torch.sdpa_{args.torch_backend}")):
                rows.setdefault(side, []).append(f"{impl}:{c['case']}:{ps}")
    got = {}
    if args.parse_csv:
        for spec in args.parse_csv:
            side, _, path = spec.partition("=")
            if side not in rows or not path:
                fail(f"--parse-csv {spec}: expected attnbench=, capi= or torch= and a file")
            with open(path, encoding="utf-8") as f:
                renamed = f.read()
            names_path = path[:-4] + ".names.csv" if path.endswith(".csv") else ""
            plain = open(names_path, encoding="utf-8").read() if names_path and os.path.exists(names_path) else ""
            got[side] = kernels(renamed, plain, rows[side])
    else:
        args.ncu = args.ncu or shutil.which("ncu")
        if not args.ncu:
            fail("ncu (Nsight Compute) not found on PATH; give --ncu PATH", 1)
        tmp = args.keep or tempfile.mkdtemp(prefix="ncu_kernels.")
        os.makedirs(tmp, exist_ok=True)
        for side, cmd in side_commands(args, tmp).items():
            renamed, plain = profile(args, side, cmd, tmp)
            got[side] = kernels(renamed, plain, rows[side])
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    lines = ["**Kernels per case** (Nsight Compute gpu__time_duration, --clock-control none, caches flushed "
             "before each kernel)", ""]
    report = []
    for c in cases:
        for ps in args.passes:
            lines.append(f"`{c['case']}` {ps} ({c['flops'][ps] / 1e12:.3f} TFLOP)")
            lines.append("")
            lines.append("| side | kernel | µs |")
            lines.append("|---|---|---:|")
            for side, ks in got.items():
                mine = [k for k in ks if k[0] == next(r for r in rows[side] if r.endswith(f":{c['case']}:{ps}"))]
                total = sum(k[2] for k in mine)
                for _, name, ns in mine:
                    lines.append(f"| {side} | `{short(name)}` | {ns / 1e3:.1f} |")
                tf = c["flops"][ps] / (total * 1e-9) / 1e12 if total else None
                lines.append(f"| {side} | **sum: {len(mine)} kernels** | **{total / 1e3:.1f}**"
                             + (f" ({tf:.0f} TFLOP/s)" if tf else "") + " |")
                report.append({"case": c["case"], "pass": ps, "side": side, "kernels": [
                    {"name": n, "ns": ns} for _, n, ns in mine], "total_ns": total, "tflops": tf})
            lines.append("")
    outside = {s: [k for k in ks if not k[0]] for s, ks in got.items()}
    for s, ks in outside.items():
        if ks:
            lines.append(f"{s}: {len(ks)} kernel(s) outside the rows' ranges (e.g. a backward's forward, "
                         f"run beforehand): {', '.join(sorted({short(k[1], 60) for k in ks}))[:400]}")
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        print(text)
    if args.json:
        write_atomic(args.json, {"metric": METRIC, "cases": report})
    return 0


if __name__ == "__main__":
    run(main)
