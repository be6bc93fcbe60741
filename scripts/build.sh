#!/usr/bin/env bash
# Configures and builds MoE Workbench into build/ (Release). Extra arguments go to cmake's
# configure step, e.g. scripts/build.sh -DMOEWB_GUI=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache (CMakeLists.txt) keys objects by paths relative to the checkout, so a fresh clone (CI)
# reuses what an earlier build of the same sources compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(pwd)}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >build-configure.log || {
  cat build-configure.log; exit 1; }
grep -E "MOEWB_|OFF|not found" build-configure.log || true
cmake --build build -j "$(nproc)"
