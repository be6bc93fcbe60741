#!/usr/bin/env bash
# Installs the Debian 12 packages MoE Workbench needs to build, test and run, skipping those
# already present. Runs apt-get as root (directly, or through sudo when not root).
# Usage: scripts/setup-deps.sh
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config python3 ccache git
  libsqlite3-dev sqlite3 libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libopenblas-dev libgtest-dev libgmock-dev libbenchmark-dev
  qt6-base-dev libgl-dev
  clang libclang-rt-dev  # libFuzzer for the fuzz harnesses (-DMOEWB_FUZZ=ON, docs/TESTING.md)
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup-deps: all ${#packages[@]} Debian packages present"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "setup-deps: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
