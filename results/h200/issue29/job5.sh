#!/usr/bin/env bash
# Issue 29's acceptance job (written 2026-12-05, session 53; first tried whole 2026-12-06 at 3fd1f08,
# no usable rows: results/h200/issue29/job5-3fd1f08/; tried again at d705a79 after its gate, on a
# slower H100 host: the grid whole in 628 s with the resume, FlashInfer 22 of 63 rows when the
# device time ended, job5-d705a79/; the README's job5 section says both): the whole decode grid
# and every peer in one job, after the L2 read flush the decode configs now set (timing.flush
# "read": job4-grid measured the write flush's write-back at 9.4-11 us a call, ours and cuDNN's
# alike). job3's other parts are done: the pdl A/B and the flush rows (job4-grid), the untimed
# phase and the flush probe (superseded), `check --impl cuda.flash_decode` (the gate's check).
# Steps, each with a time limit, the most needed first:
#   1. configs/decode_grid.json, cuda.flash_decode and cuda.cudnn_sdpa (resumed if cut: since
#      82dba79 the resume times the verified rows without verifying them again; it did so at
#      d705a79, 17 rows in 26 s): 63 cases, 333 s on an H100 (job4-grid), but 504 s of verification
#      alone on a slower H100 host (2026-12-06, d705a79: 8f284f7 since shares the reference's K/V
#      gather among a GQA group, 24-25% off a decode case's host side on the 2-core machine):
#      do not trim GRID_S below its 600 s default. The whole job needs about 22 minutes there,
#      more than a session's device time leaves after a gate: run it in a session of its own
#      (GATE=0) at a revision whose gate passed, or the gate in the next session at its revision;
#   2. FlashInfer 0.7.2 (its own file: it compiles its kernels just in time; tensor cores for GQA
#      groups of 4 or more, --flashinfer-tensor-cores auto), needs /tmp/fisite and /tmp/fa4site;
#   3. FA4 and PyTorch SDPA (cuDNN and flash backends), needs /tmp/fa4site for FA4's rows;
#   4. configs/decode_ragged.json, ours and the naive baseline (a ragged batch, fixed-seed lengths);
#   5. scripts/decode_summary.py's tables and scripts/plot.py's bandwidth figure.
# Limits: GRID_S (600 s; a cut grid is resumed for up to GRID_RESUME_S, 300 s, 0: not), FI_S
# (420 s), PEERS_S (600 s), RAGGED_S (120 s). PEERS (default
# fa4,torch_sdpa): step 3's peers; PEERS=torch_sdpa saves FA4's two parts and its rows on a short
# budget (FA4 has no split-KV on SM 9.0: 0.11-0.35x ours at batch 1 in job1, not the comparison
# the target names).
# Run by results/h200/issue27/session.sh (ISSUE29=1 ISSUE29_JOB=results/h200/issue29/job5.sh; it
# waits up to 300 s for /tmp/fisite first), which gives B (the gate's build) and W (default /tmp/j29).
# Outputs in $W: decode_grid.json, decode_grid.flashinfer.json, decode_grid.peers.json,
# decode_ragged.json, decode_summary.md, decode_grid_fwd_bf16_bandwidth.png, logs/, progress.txt.
# Commit them as results/h200/decode_grid*.json (the acceptance names that file) and
# regenerate the README block with scripts/decode_summary.py ... --readme results/h200/issue29/README.md.
set -uo pipefail
W=${W:-/tmp/j29}; mkdir -p "$W/logs"
source scripts/common.sh; attn_cudnn_from_wheel
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a "$W/progress.txt"; }
attn_job_build "$W/logs/build.txt" || { el "build FAILED"; exit 3; }; el "build: $B"
impls=(--impl cuda.flash_decode --impl cuda.cudnn_sdpa)
timeout "${GRID_S:-600}" "$B" run configs/decode_grid.json "${impls[@]}" --out "$W/decode_grid.json" \
  > "$W/logs/decode_grid.txt" 2>&1; rc=$?; el "decode_grid rc=$rc"
if { [ $rc = 124 ] || [ $rc = 143 ]; } && [ "${GRID_RESUME_S:-300}" -gt 0 ]; then
  timeout "${GRID_RESUME_S:-300}" "$B" run configs/decode_grid.json "${impls[@]}" --resume "$W/decode_grid.json" \
    > "$W/logs/decode_grid.resume.txt" 2>&1; el "decode_grid resumed rc=$?"
fi
timeout "${FI_S:-420}" python3 scripts/peers/peers.py configs/decode_grid.json --peers flashinfer \
  --attnbench "$B" --out "$W/decode_grid.flashinfer.json" > "$W/logs/decode_grid.flashinfer.txt" 2>&1
el "peers decode_grid (FlashInfer) rc=$?"
timeout "${PEERS_S:-600}" python3 scripts/peers/peers.py configs/decode_grid.json --peers "${PEERS:-fa4,torch_sdpa}" \
  --backend cudnn,flash --fa4-site /tmp/fa4site --attnbench "$B" --out "$W/decode_grid.peers.json" \
  > "$W/logs/decode_grid.peers.txt" 2>&1
el "peers decode_grid (FA4, PyTorch SDPA) rc=$?"
timeout "${RAGGED_S:-120}" "$B" run configs/decode_ragged.json --out "$W/decode_ragged.json" \
  > "$W/logs/decode_ragged.txt" 2>&1
el "decode_ragged rc=$?"
files=("$W/decode_grid.json")
for f in "$W/decode_grid.peers.json" "$W/decode_grid.flashinfer.json"; do [ -f "$f" ] && files+=("$f"); done
python3 scripts/decode_summary.py "${files[@]}" > "$W/decode_summary.md" 2>&1
el "decode_summary rc=$?"
python3 scripts/plot.py "$W/decode_grid.json" --out "$W" --stem decode_grid > "$W/logs/plot.txt" 2>&1
el "plot rc=$? (needs matplotlib there)"
el "job done"
