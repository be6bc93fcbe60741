#!/usr/bin/env bash
# Runs on the GPU machine from the folder scripts/gpu-bundle.sh packed (.gpu/): the gpu-labelled
# test suite, optionally compute-sanitizer memcheck over it, and the GPU benchmarks. Logs go to
# $OUT (or ./gpu-out). Usage: .gpu/gpu-test.sh [tests] [memcheck] [cli] [capture] [bench] [-- gtest filter]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/../gpu-out}"
mkdir -p "$out"
[[ -f "$here/lib/libopenblas.so.0.xz" ]] && xz -d -f "$here/lib/libopenblas.so.0.xz"
[[ -f "$here/bin.tar.xz" ]] && tar -C "$here" -xJf "$here/bin.tar.xz" && rm -f "$here/bin.tar.xz"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
filter="*"
steps=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --) filter="$2"; shift 2 ;;
    *) steps+=("$1"); shift ;;
  esac
done
[[ ${#steps[@]} -eq 0 ]] && steps=(tests)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
status=0
for step in "${steps[@]}"; do
  case "$step" in
    tests)
      "$here/bin/engine_cuda_tests" --gtest_filter="$filter" --gtest_output="xml:$out/gpu-tests.xml" \
        >"$out/gpu-tests.log" 2>&1 || status=1
      "$here/bin/profiler_cuda_tests" --gtest_filter="$filter" \
        --gtest_output="xml:$out/profiler-gpu-tests.xml" >>"$out/gpu-tests.log" 2>&1 || status=1
      "$here/bin/capture_cuda_tests" --gtest_filter="$filter" \
        --gtest_output="xml:$out/capture-gpu-tests.xml" >>"$out/gpu-tests.log" 2>&1 || status=1
      grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests? ran" "$out/gpu-tests.log" | tail -40 ;;
    memcheck)
      compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 9 \
        "$here/bin/engine_cuda_tests" --gtest_filter="$filter" >"$out/memcheck.log" 2>&1 || status=1
      tail -5 "$out/memcheck.log" ;;
    cli)
      # The CLI end to end on the GPU: a traced run of the tiny config, then its summary.
      "$here/bin/moewb" run -c "$here/configs/tiny.toml" --set run.backend=cuda --steps 100 \
        -o "$out/tiny-cuda.sqlite" -f -q >"$out/cli.log" 2>&1 || status=1
      "$here/bin/moewb" info "$out/tiny-cuda.sqlite" --no-config >>"$out/cli.log" 2>&1 || status=1
      # The same run with CUPTI capture: kernels, copies and NVTX joined to steps and phases.
      "$here/bin/moewb" run -c "$here/configs/small.toml" --set run.backend=cuda --steps 20 \
        --gpu-trace -o "$out/small-gputrace.sqlite" -f -q >>"$out/cli.log" 2>&1 || status=1
      "$here/bin/moewb" info "$out/small-gputrace.sqlite" --no-config >>"$out/cli.log" 2>&1 || status=1
      # Capture modes: a step window (CUPTI off outside it) and a flight recorder on step time.
      "$here/bin/moewb" run -c "$here/configs/small.toml" --set run.backend=cuda --steps 40 \
        --gpu-trace --trace-steps 10:15 -o "$out/small-window.sqlite" -f -q >>"$out/cli.log" 2>&1 || status=1
      "$here/bin/moewb" info "$out/small-window.sqlite" --no-config >>"$out/cli.log" 2>&1 || status=1
      "$here/bin/moewb" run -c "$here/configs/small.toml" --set run.backend=cuda --steps 40 \
        --gpu-trace --flight-recorder 4 --trigger-step-ms 20 -o "$out/small-flight.sqlite" -f -q \
        >>"$out/cli.log" 2>&1 || status=1
      "$here/bin/moewb" info "$out/small-flight.sqlite" --no-config >>"$out/cli.log" 2>&1 || status=1
      cat "$out/cli.log" ;;
    capture)
      # moewb capture of a PyTorch script against the PyTorch profiler's kernel count (issue 5).
      python3 "$here/capture-anchor-check.py" --moewb "$here/bin/moewb" \
        --script "$here/anchors/moe_layer.py" --out "$out/capture" >"$out/capture.log" 2>&1 || status=1
      tail -20 "$out/capture.log" ;;
    bench)
      # Ours and the PyTorch baselines (anchors/, copied next to this script) in the same call.
      # Attention runs at T = 4096 and 16384 (the anchor's default T = 32768 does not fit our
      # core's [H, T, T] workspaces); the loss heads at the anchor's defaults (T=16384 D=2048
      # V=163840); KDA, sparse attention and the MoE glue have no anchor.
      { "$here/bin/moe_layer_cuda_bench"
        (cd "$here/anchors" && python3 moe_layer.py)
        "$here/bin/attention_cuda_bench" 8 4096 16 128
        (cd "$here/anchors" && python3 attention.py 8 4096 16 128)
        "$here/bin/attention_cuda_bench" 2 16384 16 128
        (cd "$here/anchors" && python3 attention.py 2 16384 16 128)
        "$here/bin/loss_cuda_bench" 16384 2048 163840
        (cd "$here/anchors" && python3 loss.py 16384 2048 163840)
        "$here/bin/kda_cuda_bench" 4 4096 2048 16 128 64
        "$here/bin/sparse_attention_cuda_bench" 4 4096 2048 16 1 128 512 8 64
        "$here/bin/moe_glue_cuda_bench" 16384 2048 64 8
        "$here/bin/train_step_cuda_bench" "$here/configs/tiny.toml" --steps 30 --cpu
        "$here/bin/train_step_cuda_bench" "$here/configs/small.toml" --steps 30 --cpu
        "$here/bin/train_step_cuda_bench" "$here/configs/tiny.toml" --steps 30 \
          --set data.batch_size=64 --set model.seq_len=256 --set model.d_model=256 \
          --set moe.num_experts=32 --set moe.top_k=4 --set moe.d_ff=512 --set run.name=wide
        # Tracing overhead (untraced / host trace / + CUPTI every step) on the small and a
        # launch-heavy config, next to the PyTorch profiler's overhead on its MoE layer step.
        "$here/bin/trace_overhead_cuda_bench" "$here/configs/small.toml" --steps 40 --reps 3
        (cd "$here/anchors" && python3 profiler_overhead.py)
      } 2>&1 | tee "$out/bench.jsonl" ;;
    *) echo "unknown step $step (accepted: tests, memcheck, cli, capture, bench)"; status=2 ;;
  esac
done
exit $status
