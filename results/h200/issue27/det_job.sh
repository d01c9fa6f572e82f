#!/usr/bin/env bash
# Issue 27's deterministic target (written 2026-12-04; first run 2026-12-06 at 1f65ac1, its files in
# results/h200/issue27/2026-12-06-1f65ac1/): cuda.flash_bwd_wgmma with
# deterministic 0 and 1 against FA4's backward with and without its deterministic mode, one GPU
# job: configs/tune_bwd_wgmma.json's backward rows (FA3 grid shapes at seq 2k, 8k, 16k; d64, d128,
# d256; causal and not; bf16). Targets: ours deterministic >= 0.9x ours default, and >= FA4's
# deterministic backward. Run from the repository root on the GPU machine after a build (B,
# default build/attnbench, with libattnbench_capi.so beside it) and with FA4 unpacked in
# /tmp/fa4site (waits up to 600 s for /tmp/fa4site/.ready); session.sh JOBS=<this> runs it.
# Outputs in $W (default /tmp/det): det.json (ours), det.peers.json (FA4), their consoles, and
# det.md (the four columns and the two ratios per case).
set -uo pipefail
W=${W:-/tmp/det}; mkdir -p $W
B=${B:-build/attnbench}
source scripts/common.sh; attn_cudnn_from_wheel
CFG=configs/tune_bwd_wgmma.json
timeout 420 $B run $CFG --impl cuda.flash_bwd_wgmma --pass bwd --out $W/det.json > $W/det.txt 2>&1
echo "ours rc=$?"
end=$(( $(date +%s) + 600 ))
while [ ! -f /tmp/fa4site/.ready ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
timeout 420 python3 scripts/peers/peers.py $CFG --peers fa4 --fa4-site /tmp/fa4site --attnbench $B \
  --pass bwd --out $W/det.peers.json > $W/det.peers.txt 2>&1
echo "peers rc=$?"
python3 - "$W/det.json" "$W/det.peers.json" > $W/det.md <<'PY'
import json, sys
t = {}
for path in sys.argv[1:]:
    try:
        rows = json.load(open(path))["rows"]
    except (OSError, ValueError, KeyError):
        continue
    for r in rows:
        if r["status"] == "pass" and r.get("tflops"):
            det = int(r["options"].get("deterministic", 0))
            side = "ours" if r["impl"].startswith("cuda.") else "fa4"
            t[(r["case"], side, det)] = r["tflops"]
print("# Deterministic backward: TFLOP/s, one GPU job\n")
print("| case | ours | ours det. | FA4 | FA4 det. | ours det. / ours | ours det. / FA4 det. |")
print("|---|---|---|---|---|---|---|")
f = lambda v: f"{v:.1f}" if v else "-"
r = lambda a, b: f"{a / b:.2f}" if a and b else "-"
for case in sorted({k[0] for k in t}):
    o, od, a, ad = (t.get((case, s, d)) for s, d in (("ours", 0), ("ours", 1), ("fa4", 0), ("fa4", 1)))
    print(f"| {case} | {f(o)} | {f(od)} | {f(a)} | {f(ad)} | {r(od, o)} | {r(od, ad)} |")
PY
head -5 $W/det.md
