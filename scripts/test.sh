#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole CPU + GUI test suite through
# CTest (GUI tests use Qt's offscreen platform; GPU-labelled tests are excluded here: they run on
# the H200). This is what CI runs (.ci/run). It builds the CPU configuration (-DMOEWB_CUDA=OFF):
# CI has no GPU to run the CUDA tests on, and compiling every kernel would triple its time; the
# CUDA build is compiled and its tests run by scripts/gpu-bundle.sh and scripts/gpu-test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
scripts/build.sh -DMOEWB_CUDA=OFF
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE gpu
