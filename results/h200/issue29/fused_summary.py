#!/usr/bin/env python3
"""The merge A/B's table (issue 29): cuda.flash_decode with fused_combine 0 and 1 beside cuDNN, one
results file of configs/decode_merge_ab.json, one row per case: each side's median time in us, the
ratios of times (below 1: faster), fused=1's fraction of the read ceiling and of a read of its own
bytes (context.ceilings.read_curve), and the verdicts. Used by results/h200/issue29/fused_ab.sh and
results/h200/ab/2026-12-06-decode-combine-batch/job.sh.

    python3 results/h200/issue29/fused_summary.py RESULTS.json > fused_ab.md
"""
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from scripts.results_io import read_tbps_at
d = json.load(open(sys.argv[1]))
ceils = d.get("context", {}).get("ceilings") or {}
ceil = ceils.get("read_tbps")
print(f"read ceiling {ceil} TB/s; times are medians in us; the ratios are of times (below 1: faster)")
print("| case | fused=0 | fused=1 | fused1/fused0 | cuDNN | fused1/cuDNN | fused0/cuDNN | fused=1 of ceiling | of same-size read | verdicts |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
med, byt, ver = {}, {}, {}
for r in d["rows"]:
    key = "cudnn" if r["impl"] == "cuda.cudnn_sdpa" else f"f{(r.get('options') or {}).get('fused_combine', 0)}"
    ver[(r["case"], key)] = r.get("verdict") or r.get("status")
    if r.get("time"):
        med[(r["case"], key)] = r["time"]["median_ms"] * 1e3
        byt[r["case"]] = r.get("hbm_bytes")
ratios = []
for case in dict.fromkeys(c for c, _ in ver):
    a, b, n = med.get((case, "f0")), med.get((case, "f1")), med.get((case, "cudnn"))
    f = lambda x: f"{x:.1f}" if x else "-"
    q = lambda x, y: f"{x / y:.3f}" if x and y else "-"
    frac = f"{byt[case] / (b * 1e-6) / (ceil * 1e12):.2f}" if b and ceil and byt.get(case) else "-"
    at = read_tbps_at(ceils, byt.get(case)) if b else None
    size_frac = f"{byt[case] / (b * 1e-6) / (at * 1e12):.2f}" if at else "-"
    if a and b: ratios.append(b / a)
    v = "/".join(str(ver.get((case, k), "-")) for k in ("f0", "f1", "cudnn"))
    print(f"| {case} | {f(a)} | {f(b)} | {q(b, a)} | {f(n)} | {q(b, n)} | {q(a, n)} | {frac} | {size_frac} | {v} |")
if ratios:
    ratios.sort()
    print(f"\nfused1/fused0 over {len(ratios)} cases: {ratios[0]:.3f}-{ratios[-1]:.3f}, median {ratios[len(ratios) // 2]:.3f}")
