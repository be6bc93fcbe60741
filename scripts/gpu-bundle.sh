#!/usr/bin/env bash
# Builds the CUDA backend (no GUI) into build-gpu/ and packs what the H200 machine needs into
# .gpu/ (git-ignored, a few MiB): the GPU test binary, the CLI, the GPU benchmarks, the Debian
# shared libraries that machine lacks (it has glibc, libstdc++, libsqlite3 and the CUDA libraries),
# the sample configs and scripts/gpu-test.sh. Send .gpu/ along and run `.gpu/gpu-test.sh` there.
# The build folder itself is far too big (objects) to send.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(pwd)}"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEWB_CUDA=ON -DMOEWB_GUI=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 >build-gpu-configure.log || { cat build-gpu-configure.log; exit 1; }
op_benches=(attention_cuda_bench loss_cuda_bench kda_cuda_bench sparse_attention_cuda_bench
            moe_glue_cuda_bench ep_moe_layer_cuda_bench all_to_all_cuda_bench)
cmake --build build-gpu -j "$(nproc)" --target engine_cuda_tests profiler_cuda_tests moewb moe_layer_cuda_bench \
  moewb_inject capture_target capture_cuda_tests \
  train_step_cuda_bench swap_cuda_bench trace_overhead_cuda_bench cupti_floor_cuda_bench "${op_benches[@]}"
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib .gpu/configs
binaries=(build-gpu/tests/engine_cuda/engine_cuda_tests build-gpu/tests/profiler_cuda/profiler_cuda_tests
          build-gpu/cli/moewb build-gpu/cli/libmoewb_inject.so
          build-gpu/tests/profiler_cuda/capture_target build-gpu/tests/profiler_cuda/capture_cuda_tests
          build-gpu/bench/moe_layer_cuda_bench build-gpu/bench/train_step_cuda_bench
          build-gpu/bench/swap_cuda_bench
          build-gpu/bench/trace_overhead_cuda_bench build-gpu/bench/cupti_floor_cuda_bench
          "${op_benches[@]/#/build-gpu/bench/}")
for binary in "${binaries[@]}"; do
  cp "$binary" .gpu/bin/ && strip .gpu/bin/"$(basename "$binary")"
done
for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libfmt.so.9 libtomlplusplus.so.3 \
           libbenchmark.so.1debian; do
  # (awk reads all of ldconfig's output: exiting early would SIGPIPE it under pipefail)
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l && !found {print $NF; found = 1}')
  [[ -n "$path" ]] && cp -L "$path" .gpu/lib/
done
# OpenBLAS carries kernels for every x86 CPU (36 MiB); packed it is 4 MiB. gpu-test.sh unpacks it.
xz -T "$(nproc)" -f .gpu/lib/libopenblas.so.0
cp samples/configs/*.toml .gpu/configs/
cp scripts/gpu-test.sh scripts/capture-anchor-check.py scripts/parallel-breakdown.py .gpu/
# The PyTorch baselines run in the same device call as our benchmarks (ratios, not absolutes).
if [[ -d ../shared/anchors ]]; then
  mkdir -p .gpu/anchors && cp ../shared/anchors/*.py .gpu/anchors/
fi
# Every binary carries the engine's kernels (~9 MiB each); packed they fit the 64 MiB transfer.
tar -C .gpu -cJf .gpu/bin.tar.xz bin && rm -rf .gpu/bin
du -sh .gpu
