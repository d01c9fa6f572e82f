#!/usr/bin/env bash
# Fetch the FlashInfer peer (flashinfer-python 0.7.2: batch decode and prefill over paged KV
# caches, issue 29) and the dependencies that the GPU machine's PyTorch venv and the FA4 site
# (../shared/peers/fa4_wheels.sh: apache-tvm-ffi, nvidia-cutlass-dsl) do not already hold, as
# wheels for Python 3.12 x86-64; unpack them into one site folder and pack it as an xz tarball in
# parts of at most 21 MB (a call to the GPU machine carries at most 64 MiB with the tree: one part
# of 41.6 MB was refused on 2026-12-05 as too large, so two parts, one call each; device_parts.sh
# cuts the joined parts again to fit the tree of the day: one part of 41.6 MB since the tree is 19 MB):
#
#   scripts/peers/flashinfer_wheels.sh OUTDIR      # where PyPI is reachable: OUTDIR/fisite.part-*
#
# On the GPU machine, each part sent in its own call (carry an ignored folder holding it) and
# copied to /tmp/fip, then, in one command:
#   mkdir -p /tmp/fisite && cat /tmp/fip/fisite.part-* | xz -d | tar -C /tmp/fisite -x
#   python3 -c "import site; site.addsitedir('/tmp/fa4site'); site.addsitedir('/tmp/fisite'); import flashinfer"
# FlashInfer compiles its kernels just in time with the machine's CUDA toolkit (nvcc, ninja from
# this site); whether that works there is the first thing to measure (issue 29).
set -euo pipefail
out="${1:?usage: flashinfer_wheels.sh OUTDIR}"
mkdir -p "$out"; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
for p in flashinfer-python==0.7.2 cuda-python cuda-bindings cuda-pathfinder cuda-tile nccl4py \
         nccl-extensions "nvidia-cudnn-frontend>=1.31.0" nvidia-ml-py einops ninja tabulate click tqdm \
         requests urllib3 idna certifi charset-normalizer packaging; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${plat[@]}" -d "$tmp/whl" "$p"
done
mkdir -p "$tmp/site"
for w in "$tmp"/whl/*.whl; do python3 -m zipfile -e "$w" "$tmp/site"; done
tar -C "$tmp/site" -cf - . | xz -T0 -6 > "$tmp/fisite.tar.xz"
rm -f "$out"/fisite.part-*
split -b 21000000 -d "$tmp/fisite.tar.xz" "$out/fisite.part-"
ls -l "$out"/fisite.part-*
