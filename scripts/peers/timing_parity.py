#!/usr/bin/env python3
"""Timing parity: attnbench's timer against the peers' timer on the same kernels.

    python3 scripts/peers/timing_parity.py RUN.json PEERS.json [--tolerance 0.03] [--json OUT.json] [--check]

RUN.json: `attnbench run` of some implementations (the harness's timer: Google Benchmark, CUDA
events around each call, L2 flushed before it). PEERS.json: scripts/peers/attnbench_impls.py (and
peers.py) rows "attnbench:<impl>" for the same cases: the same kernels through libattnbench_capi,
timed by the peers' timer (CUDA graph replays between events, L2 flushed before). For every
(case, pass, impl) in both, the ratio peer median / harness median; within --tolerance is parity.

Where the file also has torch.sdpa_cudnn rows and RUN.json cuda.cudnn_sdpa rows, a second table
separates the timer from the engine for cuDNN: attnbench's cuDNN graphs under both timers, and
PyTorch's cuDNN under the peers' timer. If attnbench:cuda.cudnn_sdpa ~ cuda.cudnn_sdpa (timers
agree) but torch.sdpa_cudnn differs from both, the difference is cuDNN's engine choice for the two
graphs (scripts/ncu_kernels.py lists the kernels each runs).

Markdown on stdout; --json writes the pairs. Exit 0; with --check, 1 when a pair is outside the
tolerance; 2 on bad input.
"""
import argparse
import json
import os
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from scripts.entry import run  # noqa: E402
from scripts.results_io import load_results, write_atomic  # noqa: E402


def fail(msg):
    print(f"timing_parity.py: {msg}", file=sys.stderr)
    sys.exit(2)


def timed(rows):
    out = {}
    for r in rows:
        t = r.get("time") or {}
        if r.get("status") == "pass" and t.get("median_ms"):
            key = (r["case"], r["pass"], r["impl"], json.dumps(r.get("options") or {}, sort_keys=True))
            out[key] = r
    return out


def tflops(r):
    return r.get("tflops") or (r["flops"] / (r["time"]["median_ms"] * 1e-3) / 1e12)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="attnbench run results (the harness's timer)")
    ap.add_argument("peers", help="peer results with attnbench:<impl> rows (the peers' timer)")
    ap.add_argument("--tolerance", type=float, default=0.03, help="parity band, a fraction (default 0.03)")
    ap.add_argument("--json", help="write the pairs here")
    ap.add_argument("--check", action="store_true", help="exit 1 when a pair is outside the tolerance")
    a = ap.parse_args()
    run = timed(load_results(a.run, fail, "run")["rows"])
    peer = timed(load_results(a.peers, fail, "peers")["rows"])
    pairs = []
    for (case, ps, impl, options), r in sorted(run.items()):
        p = peer.get((case, ps, "attnbench:" + impl, options))
        if not p:
            continue
        h, q = r["time"]["median_ms"], p["time"]["median_ms"]
        pairs.append({"case": case, "pass": ps, "impl": impl, "options": json.loads(options),
                      "harness_ms": h, "harness_cv": r["time"].get("cv"), "peer_ms": q, "peer_cv": p["time"].get("cv"),
                      "peer_method": p["time"].get("method", ""), "ratio": q / h,
                      "within": abs(q / h - 1) <= a.tolerance})
    if not pairs:
        fail("no (case, pass, impl) timed in both files (the peer rows are named attnbench:<impl>)")
    print(f"**Timing parity** (peer timer / attnbench timer, same kernel; parity within "
          f"{a.tolerance * 100:.0f}%)\n")
    print("| case | pass | implementation | attnbench ms (cv) | peer ms (cv) | peer / attnbench | |")
    print("|---|---|---|---:|---:|---:|---|")
    for x in pairs:
        m = "" if x["peer_method"] == "cuda_graph" else f" ({x['peer_method'][:40]})"
        print(f"| {x['case']} | {x['pass']} | `{x['impl']}` | {x['harness_ms']:.4f} ({(x['harness_cv'] or 0) * 100:.1f}%) | "
              f"{x['peer_ms']:.4f} ({(x['peer_cv'] or 0) * 100:.1f}%){m} | {x['ratio']:.3f} | "
              f"{'ok' if x['within'] else 'OUTSIDE'} |")
    worst = max(pairs, key=lambda x: abs(x["ratio"] - 1))
    n_in = sum(x["within"] for x in pairs)
    print(f"\n{n_in} of {len(pairs)} pairs within {a.tolerance * 100:.0f}%; largest difference "
          f"{(worst['ratio'] - 1) * 100:+.1f}% ({worst['impl']} {worst['case']} {worst['pass']}).")

    engine = []
    for (case, ps, impl, options), r in sorted(run.items()):
        if impl != "cuda.cudnn_sdpa":
            continue
        via_capi = peer.get((case, ps, "attnbench:cuda.cudnn_sdpa", options))
        torch_cudnn = peer.get((case, ps, "torch.sdpa_cudnn", "{}"))
        if not torch_cudnn:
            continue
        engine.append({"case": case, "pass": ps, "harness_tflops": tflops(r),
                       "capi_tflops": tflops(via_capi) if via_capi else None, "torch_tflops": tflops(torch_cudnn)})
    if engine:
        print("\n**cuDNN: timer or engine?** (TFLOP/s)\n")
        print("| case | pass | `cuda.cudnn_sdpa`, attnbench timer | the same, peer timer | PyTorch cuDNN, peer timer |"
              " PyTorch / attnbench (peer timer) |")
        print("|---|---|---:|---:|---:|---:|")
        for e in engine:
            c = e["capi_tflops"]
            capi_text = "-" if c is None else f"{c:.0f}"
            ratio_text = "-" if c is None else f"{e['torch_tflops'] / c:.3f}"
            print(f"| {e['case']} | {e['pass']} | {e['harness_tflops']:.0f} | {capi_text} | "
                  f"{e['torch_tflops']:.0f} | {ratio_text} |")
    if a.json:
        write_atomic(a.json, {"tolerance": a.tolerance, "pairs": pairs, "cudnn": engine,
                              "run": os.path.basename(a.run), "peers": os.path.basename(a.peers)})
    return 1 if a.check and n_in < len(pairs) else 0


if __name__ == "__main__":
    run(main)
