#!/usr/bin/env bash
# The peers that the GPU machine cannot install (FA4, FlashInfer), packed into parts small enough
# for one device call each, in one command, where PyPI is reachable (this project's CPU machine):
#
#   scripts/peers/device_parts.sh [OUTDIR]      (default build-peers: ignored by git)
#
# writes OUTDIR/fa4/fa4site.part-NN (../shared/peers/fa4_wheels.sh's site, about 72 MB packed) and
# OUTDIR/fi/fisite.part-NN (scripts/peers/flashinfer_wheels.sh's, about 42 MB), each cut into the
# fewest equal parts that fit one device call: a call carries the working tree (`git archive HEAD
# | wc -c`) plus its carried paths within 64 MiB, so a part is at most 64 MiB - the tree - a
# margin of MARGIN_MIB (default 5, for the commits of a session: a tree of 30.6 MB with a part of
# 36 MB came within 0.5 MB of the limit on 2026-12-04). With the tree at 19 MB (2026-12-05, the
# archived JSON gzipped) that is FA4 in 2 parts and FlashInfer in 1: three calls, not five.
# PART_BYTES=N forces the part size. A new checkout starts without OUTDIR (ignored folders do not
# travel between sessions), so run this before the first device call of a session that needs a
# peer; about 2-4 minutes.
#
# Each folder also gets parts.sha256, the manifest that `results/h200/issue27/session.sh --step
# --part PATH` checks a carried part against (carry it with each part). By hand instead: one part
# per call (carry OUTDIR/fa4/fa4site.part-NN, copy it to /tmp/fap), the calls back to back, and in
# the call that brings the last part:
#   mkdir -p /tmp/fa4site && cat /tmp/fap/fa4site.part-* | xz -d -T8 | tar -C /tmp/fa4site -x
#   mkdir -p /tmp/fisite && cat /tmp/fip/fisite.part-* | xz -d | tar -C /tmp/fisite -x
# (results/h200/issue27/session.sh's header has the whole sequence.)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-$root/build-peers}"
limit=$((64 * 1024 * 1024))
tree=$(cd "$root" && git archive HEAD | wc -c)
margin_mib="${MARGIN_MIB:-5}"
[[ "$margin_mib" =~ ^[0-9]+$ ]] ||
  { echo "device_parts.sh: MARGIN_MIB '$margin_mib': expected a whole number of MiB" >&2; exit 2; }
max_part=$((limit - tree - margin_mib * 1024 * 1024))
if [ -n "${PART_BYTES:-}" ]; then
  [[ "$PART_BYTES" =~ ^[0-9]+$ ]] && [ "$PART_BYTES" -ge 1000000 ] ||
    { echo "device_parts.sh: PART_BYTES '$PART_BYTES': expected a whole number of bytes >= 1000000" >&2; exit 2; }
  max_part=$PART_BYTES
fi
[ "$max_part" -ge 1000000 ] ||
  { echo "device_parts.sh: the tree ($tree bytes) leaves no room for a part in a call of $limit bytes" >&2; exit 2; }
fa4="$(dirname "$root")/shared/peers/fa4_wheels.sh"
[ -f "$fa4" ] || { echo "device_parts.sh: ../shared/peers/fa4_wheels.sh not found beside the checkout" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# pack NAME MAKER DEST: the maker's parts joined, then cut into the fewest equal parts of at most
# max_part bytes, in DEST.
pack() {
  local name=$1 maker=$2 dest=$3
  echo "[device_parts] $name: $maker"
  mkdir -p "$tmp/$name"
  bash "$maker" "$tmp/$name" > "$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log" >&2; exit 1; }
  cat "$tmp/$name/${name}site.part-"* > "$tmp/$name.tar.xz"
  local total n part
  total=$(stat -c %s "$tmp/$name.tar.xz")
  n=$(( (total + max_part - 1) / max_part ))
  part=$(( (total + n - 1) / n ))
  mkdir -p "$dest"
  rm -f "$dest/${name}site.part-"*
  split -b "$part" -d "$tmp/$name.tar.xz" "$dest/${name}site.part-"
  # The manifest that session.sh --step checks each carried part against (and counts them by).
  (cd "$dest" && sha256sum "${name}site.part-"* > parts.sha256)
  echo "[device_parts] $name: $total bytes in $n part(s) of at most $part"
}
pack fa4 "$fa4" "$out/fa4"
pack fi "$root/scripts/peers/flashinfer_wheels.sh" "$out/fi"
ls -l "$out"/fa4 "$out"/fi
largest=$(ls -l "$out"/fa4/* "$out"/fi/* | awk '{print $5}' | sort -n | tail -1)
left=$((limit - tree - largest))
echo "[device_parts] tree $tree bytes + largest part $largest = $((tree + largest)) of $limit ($left left)"
[ "$left" -ge $((4 * 1024 * 1024)) ] ||
  echo "[device_parts] warning: less than 4 MiB left in a call: commit less, or set MARGIN_MIB larger" >&2
