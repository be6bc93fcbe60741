#!/usr/bin/env bash
# The main job on the embedded default: install what is missing, build, train the tiny sample
# MoE model on the CPU while tracing it to runs/demo.sqlite, print the summary and the trace's
# info, and open the workbench on the file when a display is available.
# Usage: scripts/demo.sh [extra `moewb run` arguments, e.g. --steps 100 --set moe.top_k=1]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
scripts/build.sh
build/cli/moewb run --config samples/configs/tiny.toml --out runs/demo.sqlite --force "$@"
build/cli/moewb info runs/demo.sqlite --no-config
if [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" && -x build/gui/moewb-gui ]]; then
  echo "opening the workbench on runs/demo.sqlite"
  nohup build/gui/moewb-gui runs/demo.sqlite >/dev/null 2>&1 &
else
  echo "no display: open it later with  build/gui/moewb-gui runs/demo.sqlite"
fi
