#!/usr/bin/env bash
# Issue 29: results/h200/issue29/fi_lse_probe.py as a session.sh job (JOBS=<this>; about a minute
# after FlashInfer's JIT build of its two decode modules). Needs FlashInfer's site: the chain's
# calls carry build-peers/fi/fisite.part-00 (with its parts.sha256) as well as FA4's parts; this
# waits up to FI_WAIT_S (default 300) for /tmp/fisite/.ready. Output in $W (default /tmp/fi_lse):
# fi_lse.md, probe.txt.
set -uo pipefail
W=${W:-/tmp/fi_lse}; mkdir -p "$W"
end=$(( $(date +%s) + ${FI_WAIT_S:-300} ))
while [ ! -f /tmp/fisite/.ready ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
[ -f /tmp/fisite/.ready ] || { echo "fi_lse_probe.sh: no /tmp/fisite/.ready after ${FI_WAIT_S:-300} s" | tee "$W/probe.txt"; exit 3; }
timeout 420 python3 results/h200/issue29/fi_lse_probe.py --out "$W/fi_lse.md" > "$W/probe.txt" 2>&1
echo "probe rc=$?"
