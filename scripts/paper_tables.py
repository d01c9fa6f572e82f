#!/usr/bin/env python3
"""FlashAttention-1 Figure 2 (left and middle) as tables, from attnbench results with HBM bytes.

    python3 scripts/paper_tables.py fig2 results/h200/fa1_fig2.json
    python3 scripts/paper_tables.py block results/h200/fa1_block_size.json

The input is a results file that scripts/ncu_hbm.py merged Nsight Compute's DRAM bytes into
(extra.hbm_read_bytes / extra.hbm_write_bytes). Output: a markdown table on stdout.

fig2: one line per implementation and pass, with
  - GFLOP, FlashAttention-2 convention: forward 4*b*h*N^2*d (halved when causal), backward 2.5x,
    forward+backward 3.5x -- the same count for every implementation (what TFLOP/s divides);
  - GFLOP executed (the FlashAttention-1 paper's counting: the matrix products an implementation
    really performs): standard attention's backward reuses the stored P (4 products of 2*N^2*d
    for dV, dP, dQ, dK: backward 2x forward, forward+backward 3x), flash's backward recomputes
    S = QK^T first (5 products: 2.5x, 3.5x);
  - HBM read + write GB measured by Nsight Compute (every kernel of the call, caches flushed
    before each kernel), and the median runtime;
  - where each call sits against the ceilings measured in the same run (context.ceilings):
    TFLOP/s over the bf16 GEMM ceiling, HBM bytes per second over the device-copy ceiling;
  - the seeds' analytic model of standard attention's forward: 16Nd + 12N^2 bytes per head at
    fp32, scaled to the dtype (bf16/f16: half), and the same model's own line items, which add up
    to 16Nd + 16N^2 (S written, S read and P written by the softmax, P read by PV).
block: one line per block_c of cuda.flash_fwd with runtime and HBM GB.
Exit codes: 0 printed, 2 bad input (also a file without HBM bytes).
"""
import os
import sys

if not __package__:  # run as a file: the repository root on the path, for the `scripts` package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scripts.entry import run  # noqa: E402
from scripts.results_io import load_results  # noqa: E402

DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


def fail(msg):
    print(f"paper_tables.py: {msg}", file=sys.stderr)
    sys.exit(2)


def hbm_gb(row):
    e = row.get("extra") or {}
    if "hbm_read_bytes" not in e:
        return None
    return (e["hbm_read_bytes"] + e["hbm_write_bytes"]) / 1e9


def fmt(x, nd=3):
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.{nd}g}"


def fig2(res):
    rows = [r for r in res["rows"] if r["status"] == "pass"]
    if not rows:
        fail("no passing rows")
    if not any(hbm_gb(r) is not None for r in rows):
        fail("no HBM bytes in this file: merge them first with scripts/ncu_hbm.py")
    p = rows[0]["problem"]
    b, h, n, nk, d = p["batch"], p["heads_q"], p["seq_q"], p["seq_kv"], p["head_dim"]
    heads = b * h
    fwd = 4.0 * heads * n * nk * d / (2 if p["causal"] else 1)
    conv = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}
    standard = {"cuda.standard_cublas", "cuda.naive_3pass", "cpu.naive_3pass"}
    executed_std = {"fwd": 1.0, "bwd": 2.0, "fwd_bwd": 3.0}
    by = {"fwd": 0, "bwd": 1, "fwd_bwd": 2}
    rows.sort(key=lambda r: (by[r["pass"]], r["impl"]))
    base = {r["pass"]: r for r in rows if r["impl"] == "cuda.standard_cublas"}
    print(f"FlashAttention-1 Figure 2 shape: batch {b}, heads {h}, seq {n}, head_dim {d}, "
          f"{p['dtype']}, {'causal' if p['causal'] else 'non-causal'}; "
          f"{res['context'].get('devices', [{}])[0].get('name', '?') if res['context'].get('devices') else '?'}")
    print()
    ceil = res["context"].get("ceilings") or {}
    gemm, copy = ceil.get("bf16_gemm_tflops"), ceil.get("copy_tbps")
    print("| pass | implementation | GFLOP (FA2 convention) | GFLOP executed | HBM R+W GB (ncu) | "
          "HBM vs standard_cublas | runtime ms | speedup vs standard_cublas | TFLOP/s (of GEMM ceiling) | "
          "HBM TB/s (of copy ceiling) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ps = r["pass"]
        executed = fwd * (executed_std[ps] if r["impl"] in standard else conv[ps])
        g = hbm_gb(r)
        t = (r.get("time") or {}).get("median_ms")
        bg = hbm_gb(base[ps]) if ps in base else None
        bt = (base[ps].get("time") or {}).get("median_ms") if ps in base else None
        ratio = f"1/{bg / g:.1f}" if g and bg and r["impl"] != "cuda.standard_cublas" else "-"
        sp = f"{bt / t:.2f}" if t and bt else "-"
        tf = fwd * conv[ps] / (t * 1e-3) / 1e12 if t else None
        bw = g / (t * 1e-3) / 1e3 if g and t else None
        tf_s = f"{fmt(tf)} ({tf / gemm:.2f})" if tf and gemm else fmt(tf)
        bw_s = f"{bw:.2f} ({bw / copy:.2f})" if bw and copy else fmt(bw)
        print(f"| {ps} | {r['impl']} | {fwd * conv[ps] / 1e9:.1f} | {executed / 1e9:.1f} | {fmt(g)} | {ratio} | "
              f"{fmt(t)} | {sp} | {tf_s} | {bw_s} |")
    eb = DTYPE_BYTES[p["dtype"]]
    seed = (16 * n * d + 12 * n * n) * eb / 4 * heads / 1e9
    items = (16 * n * d + 16 * n * n) * eb / 4 * heads / 1e9
    comp = 4 * n * d * eb * heads / 1e9
    print()
    if gemm and copy:
        print(f"Ceilings measured in the same run: bf16 GEMM 8192^3 {gemm:.0f} TFLOP/s, device copy {copy:.2f} TB/s "
              f"(read + write). TFLOP/s counts the FA2-convention FLOPs; HBM TB/s is the measured bytes over the "
              f"median runtime (the profiled and the timed calls are separate runs of the same call).")
        print()
    print(f"Analytic model, standard attention forward ({p['dtype']}, {heads} heads): the seeds' "
          f"16Nd + 12N^2 bytes per head (fp32) gives {seed:.2f} GB; the model's own line items add up to "
          f"16Nd + 16N^2, {items:.2f} GB. Flash: Theta(N^2 d^2 / M), at least the compulsory "
          f"Q, K, V read and O written once: {comp:.3f} GB.")


def block(res):
    rows = [r for r in res["rows"] if r["status"] == "pass"]
    if not any(hbm_gb(r) is not None for r in rows):
        fail("no HBM bytes in this file: merge them first with scripts/ncu_hbm.py")
    rows.sort(key=lambda r: int((r.get("options") or {}).get("block_c", 0)))
    print("| implementation | block_c (Bc) | runtime ms | TFLOP/s | HBM R+W GB (ncu) |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        t = (r.get("time") or {}).get("median_ms")
        print(f"| {r['impl']} | {(r.get('options') or {}).get('block_c', 'default')} | {fmt(t)} | "
              f"{fmt(r.get('tflops'))} | {fmt(hbm_gb(r))} |")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("fig2", "block"):
        fail("usage: paper_tables.py {fig2|block} RESULTS.json")
    res = load_results(sys.argv[2], fail)
    (fig2 if sys.argv[1] == "fig2" else block)(res)
    return 0


if __name__ == "__main__":
    run(main)
