#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole CPU + GUI test suite through
# CTest (GUI tests use Qt's offscreen platform; GPU-labelled tests are excluded here: they run on
# the H200). This is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE gpu
