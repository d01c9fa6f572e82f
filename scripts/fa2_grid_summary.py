#!/usr/bin/env python3
"""The README's summary tables of the FlashAttention-2 grid: for each pass (fwd, fwd_bwd) and each
(head_dim, causal) cell, TFLOP/s per seq of our tensor-core kernel, PyTorch's flash and cuDNN
backends, cuda.cudnn_sdpa, cuda.standard_cublas and the CUDA-core flash kernel, with the ratios to
PyTorch flash, cuda.cudnn_sdpa and cuda.standard_cublas. Markdown on stdout.

  python3 scripts/fa2_grid_summary.py results/h200/fa2_grid.json results/h200/fa2_grid.torch_sdpa.json

A cell without a passing row prints "-". Exit 2 on a missing or unreadable file, or one that is not
an attnbench results file.
"""
import argparse
import sys

from results_io import load_results

OURS = {"fwd": "cuda.flash_fwd_mma", "fwd_bwd": "cuda.flash_bwd_mma"}
CORES = {"fwd": "cuda.flash_fwd", "fwd_bwd": "cuda.flash_bwd"}


def fail(msg):
    print(f"fa2_grid_summary: {msg}", file=sys.stderr)
    sys.exit(2)


def index(rows):
    out = {}
    for r in rows:
        if r.get("status") != "pass" or not r.get("tflops") or r.get("params"):
            continue
        p = r["problem"]
        out[(r["impl"], r["pass"], p["head_dim"], bool(p["causal"]), p["seq_q"])] = r["tflops"]
    return out


def fmt(x):
    return "-" if x is None else f"{x:.0f}"


def ratio(a, b):
    return "-" if a is None or b is None else f"{a / b:.2f}×"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("grid", help="attnbench results of configs/fa2_grid.json")
    ap.add_argument("torch", help="scripts/peers/torch_sdpa.py results of the same config")
    a = ap.parse_args()
    t = index(load_results(a.grid, fail, "grid")["rows"])
    t.update(index(load_results(a.torch, fail, "peer")["rows"]))
    seqs = sorted({k[4] for k in t})
    cells = sorted({(k[2], k[3]) for k in t})
    for ps in ("fwd", "fwd_bwd"):
        ours, cores = OURS[ps], CORES[ps]
        print(f"**{ps}** (TFLOP/s; PyTorch from the same GPU job)\n")
        print("| head_dim, causal | implementation | " + " | ".join(str(s) for s in seqs) + " |")
        print("|---|---|" + "---:|" * len(seqs))
        for d, c in cells:
            get = lambda impl, s: t.get((impl, ps, d, c, s))  # noqa: E731
            lines = [
                (f"`{ours}`", [fmt(get(ours, s)) for s in seqs]),
                ("PyTorch flash (FA2)", [fmt(get("torch.sdpa_flash", s)) for s in seqs]),
                (f"`{ours}` / PyTorch flash", [ratio(get(ours, s), get("torch.sdpa_flash", s)) for s in seqs]),
                ("`cuda.cudnn_sdpa`", [fmt(get("cuda.cudnn_sdpa", s)) for s in seqs]),
                ("PyTorch cuDNN", [fmt(get("torch.sdpa_cudnn", s)) for s in seqs]),
                (f"`{ours}` / `cuda.cudnn_sdpa`", [ratio(get(ours, s), get("cuda.cudnn_sdpa", s)) for s in seqs]),
                ("`cuda.standard_cublas`", [fmt(get("cuda.standard_cublas", s)) for s in seqs]),
                (f"`{cores}` (CUDA cores)", [fmt(get(cores, s)) for s in seqs]),
                (f"`{ours}` / `cuda.standard_cublas`",
                 [ratio(get(ours, s), get("cuda.standard_cublas", s)) for s in seqs]),
            ]
            for i, (name, vals) in enumerate(lines):
                head = f"{d}, {'causal' if c else 'non-causal'}" if i == 0 else ""
                print(f"| {head} | {name} | " + " | ".join(vals) + " |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
