#!/usr/bin/env bash
# The peers that the GPU machine cannot install (FA4, FlashInfer), packed into parts small enough
# for one device call each, in one command, where PyPI is reachable (this project's CPU machine):
#
#   scripts/peers/device_parts.sh [OUTDIR]      (default build-peers: ignored by git)
#
# writes OUTDIR/fa4x3/fa4site.part-00..02 (../shared/peers/fa4_wheels.sh's site, about 72 MB packed)
# and OUTDIR/fi/fisite.part-00..01 (scripts/peers/flashinfer_wheels.sh's, about 42 MB), each part
# at most PART_BYTES (default 24100000). Why that size: a device call carries the working tree
# (about 31 MB: `git archive HEAD | wc -c`) plus its carried paths within 64 MiB, and a tree of
# 30.6 MB with a 36 MB part came within 0.5 MB of the limit (2026-12-04). The script checks the
# sum for the largest part against the tree's size now and warns when less than 4 MiB is left.
# A new checkout starts without OUTDIR (ignored folders do not travel between sessions), so run
# this before the first device call of a session that needs a peer; about 2-4 minutes.
#
# On the GPU machine, one part per call (carry OUTDIR/fa4x3/fa4site.part-NN, copy it to /tmp), and
# in the call that brings the last part:
#   mkdir -p /tmp/fa4site && cat /tmp/fa4site.part-0* | xz -d -T8 | tar -C /tmp/fa4site -x
#   mkdir -p /tmp/fisite && cat /tmp/fip/fisite.part-* | xz -d | tar -C /tmp/fisite -x
# (results/h200/issue27/session.sh's header has the whole sequence.)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-$root/build-peers}"
part_bytes="${PART_BYTES:-24100000}"
[[ "$part_bytes" =~ ^[0-9]+$ ]] && [ "$part_bytes" -ge 1000000 ] ||
  { echo "device_parts.sh: PART_BYTES '$part_bytes': expected a whole number of bytes >= 1000000" >&2; exit 2; }
fa4="$(dirname "$root")/shared/peers/fa4_wheels.sh"
[ -f "$fa4" ] || { echo "device_parts.sh: ../shared/peers/fa4_wheels.sh not found beside the checkout" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# pack NAME MAKER DEST: the maker's parts joined, then split again at part_bytes into DEST.
pack() {
  local name=$1 maker=$2 dest=$3
  echo "[device_parts] $name: $maker"
  mkdir -p "$tmp/$name"
  bash "$maker" "$tmp/$name" > "$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log" >&2; exit 1; }
  mkdir -p "$dest"
  rm -f "$dest/${name}site.part-"*
  cat "$tmp/$name/${name}site.part-"* | split -b "$part_bytes" -d - "$dest/${name}site.part-"
}
pack fa4 "$fa4" "$out/fa4x3"
pack fi "$root/scripts/peers/flashinfer_wheels.sh" "$out/fi"
ls -l "$out"/fa4x3 "$out"/fi
largest=$(ls -l "$out"/fa4x3/* "$out"/fi/* | awk '{print $5}' | sort -n | tail -1)
tree=$(cd "$root" && git archive HEAD | wc -c)
limit=$((64 * 1024 * 1024))
left=$((limit - tree - largest))
echo "[device_parts] tree $tree bytes + largest part $largest = $((tree + largest)) of $limit ($left left)"
[ "$left" -ge $((4 * 1024 * 1024)) ] ||
  echo "[device_parts] warning: less than 4 MiB left in a call: set PART_BYTES smaller" >&2
