# Shared by the README's commands: dependencies, configure, build. Source it; don't run it.
# Usage: attn_setup [build-dir]   (sets ATTN_BUILD)
set -euo pipefail
ATTN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ATTN_DEBS=(cmake g++ make libeigen3-dev libcli11-dev nlohmann-json3-dev libbenchmark-dev libgtest-dev python3
           libbenchmark-tools python3-scipy)  # the last two: Google Benchmark's compare.py, for test_gbench_interop

attn_log() { printf '[attnbench] %s\n' "$*" >&2; }

# Install missing Debian packages (ATTN_DEBS and the arguments) when run as root; otherwise say
# what is missing.
attn_install_deps() {
  local missing=()
  for p in "${ATTN_DEBS[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
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

# Configure (first time) and build incrementally with all cores.
attn_build() {
  ATTN_BUILD="${1:-$ATTN_ROOT/build}"
  shift || true
  local jobs; jobs="$(nproc 2>/dev/null || echo 2)"
  if [ ! -f "$ATTN_BUILD/CMakeCache.txt" ]; then
    cmake -S "$ATTN_ROOT" -B "$ATTN_BUILD" -DCMAKE_BUILD_TYPE=Release "$@" >&2
  fi
  cmake --build "$ATTN_BUILD" -j "$jobs" >&2
}
