# Shared by the README's commands and the GPU scripts: dependencies, cuDNN from PyTorch's wheel,
# configure, build. Source it (it sets no shell options: the caller's stay); don't run it.
ATTN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ATTN_DEBS=(cmake g++ make libeigen3-dev libcli11-dev nlohmann-json3-dev libbenchmark-dev libgtest-dev python3
           libbenchmark-tools python3-scipy)  # the last two: Google Benchmark's compare.py, for test_gbench_interop

attn_log() { printf '[attnbench] %s\n' "$*" >&2; }

# Install missing Debian packages (ATTN_DEBS and the arguments) when run as root; otherwise say
# what is missing.
attn_install_deps() {
  local missing=()
  for p in "${ATTN_DEBS[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' > /dev/null || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    attn_log "installing missing packages: ${missing[*]}"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
      attn_log "warning: apt-get could not install ${missing[*]}; trying to build with what is present"
    fi
  else
    attn_log "warning: missing packages ${missing[*]} (run as root to install them); trying anyway"
  fi
}

# The GPU scripts' nvcc target: the H200 alone (sm_90a: wgmma, TMA), which builds in half the time
# of CMake's default (sm_90a and sm_80). Used by gpu_run.sh and fa3_job.sh as
# "-DATTNBENCH_CUDA_GENCODE=$ATTN_GPU_GENCODE".
ATTN_GPU_GENCODE="-gencode=arch=compute_90a,code=sm_90a"
# The flags CMakeLists.txt gives attn_impls_cuda (Release) but the architecture, for the scripts
# that compile one kernel file by hand (hopper_sass.sh, resource_report.sh).
ATTN_NVCC_FLAGS=(-std=c++20 -O3 -DNDEBUG --expt-relaxed-constexpr -I"$ATTN_ROOT/core/include"
                 -I"$ATTN_ROOT/harness/include" -I"$ATTN_ROOT/impls/cuda")

# Extra CMake arguments for the next attn_build (the callers append: -DATTNBENCH_WERROR=ON, ...).
ATTN_CMAKE_ARGS=()

# cuDNN from PyTorch's wheel (site-packages/nvidia/cudnn: the GPU machine has no system cuDNN):
# its headers for the build of cuda.cudnn_sdpa, its library for that implementation's dlopen at run
# time (ATTNBENCH_CUDNN_LIB, LD_LIBRARY_PATH). Nothing happens where no such wheel is installed.
# The one place this is set up: the README's commands and scripts/gpu_gate.sh call it.
attn_cudnn_from_wheel() {
  local sites d
  command -v python3 >/dev/null || return 0
  sites=$(python3 -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null) || return 0
  while IFS= read -r d; do
    d="$d/nvidia/cudnn"
    if [ -f "$d/include/cudnn.h" ] && [ -e "$d/lib/libcudnn.so.9" ]; then
      ATTN_CMAKE_ARGS+=("-DCUDNN_INCLUDE_DIR=$d/include")
      export LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      export ATTNBENCH_CUDNN_LIB="${ATTNBENCH_CUDNN_LIB:-$d/lib/libcudnn.so.9}"
      attn_log "cuDNN from PyTorch's wheel: $d"
      return 0
    fi
  done <<<"$sites"
}

# Configure (the first time, and again when ATTN_CMAKE_ARGS has arguments) and build
# incrementally with all cores: the given targets, or everything.
# Usage: attn_build BUILD_DIR [TARGET...]   (sets ATTN_BUILD)
attn_build() {
  ATTN_BUILD="${1:-$ATTN_ROOT/build}"
  shift || true
  local jobs; jobs="$(nproc 2>/dev/null || echo 2)"
  if [ ! -f "$ATTN_BUILD/CMakeCache.txt" ]; then
    cmake -S "$ATTN_ROOT" -B "$ATTN_BUILD" -DCMAKE_BUILD_TYPE=Release "${ATTN_CMAKE_ARGS[@]}" >&2
  elif [ ${#ATTN_CMAKE_ARGS[@]} -gt 0 ]; then
    cmake -S "$ATTN_ROOT" -B "$ATTN_BUILD" "${ATTN_CMAKE_ARGS[@]}" >&2
  fi
  local targets=() t
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$ATTN_BUILD" -j "$jobs" "${targets[@]}" >&2
}

# For a GPU job script (results/h200/*/job*.sh), after attn_cudnn_from_wheel: sets B to the
# attnbench binary to run. B as given (default build/attnbench: the gate's build when the job runs
# right after it on the same warm machine) when it and libattnbench_capi.so beside it exist; else
# this tree is built for the H200 in build-gpu/ (attnbench and the C API), its log in LOG.
# Returns 3 when there is no binary after that.
attn_job_build() {
  local log="$1"
  B="${B:-build/attnbench}"
  if [ ! -x "$B" ] || [ ! -e "$(dirname "$B")/libattnbench_capi.so" ]; then
    ( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_CUDA_GENCODE="$ATTN_GPU_GENCODE" \
        "${ATTN_CMAKE_ARGS[@]}" && time cmake --build build-gpu -j "$(nproc)" --target attnbench attnbench_capi ) >"$log" 2>&1
    B=build-gpu/attnbench
  fi
  [ -x "$B" ] || return 3
}
