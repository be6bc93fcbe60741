#!/usr/bin/env bash
# Runs on the GPU machine from the folder scripts/gpu-bundle.sh packed (.gpu/): the gpu-labelled
# test suite, optionally compute-sanitizer memcheck over it, and the GPU benchmarks. Logs go to
# $OUT (or ./gpu-out). Usage: .gpu/gpu-test.sh [tests] [memcheck] [cli] [capture] [parallel]
# [multigpu] [scaling] [bench] [overhead] [h200] [swap] [-- gtest filter]. `parallel` runs on one GPU (virtual
# ranks, NCCL with one rank); `multigpu` needs 2+ GPUs (NCCL across processes, a killed rank,
# all-to-all and EP MoE layer benchmarks next to the PyTorch EP anchor); `overhead` measures
# tracing overhead alone (the training step, CUPTI's floor per kernel, the PyTorch profiler);
# `h200` trains samples/configs/h200.toml for a few steps in both sparse-attention stages and
# prints tokens/s, MFU and the phase breakdown from our own trace. `swap` runs the swap tests
# (bitwise equality with swap on, events, auto mode), racecheck on the smallest swap case and
# the swap benchmark on h200.toml (off / auto at a forcing HBM target / manual).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/../gpu-out}"
# Logs and a few chosen traces go to $out (the device tool brings back only a handful of files);
# everything else (test XML, other traces) stays in $work.
work="${MOEWB_GPU_WORK:-/tmp/moewb-gpu-work}"
mkdir -p "$out" "$work"
[[ -f "$here/lib/libopenblas.so.0.xz" ]] && xz -d -f "$here/lib/libopenblas.so.0.xz"
[[ -f "$here/bin.tar.xz" ]] && tar -C "$here" -xJf "$here/bin.tar.xz" && rm -f "$here/bin.tar.xz"
# The tests read the sample configs from a source tree (tests/source_dir.h): the bundle's copy.
if [[ -z "${MOEWB_SOURCE_DIR:-}" ]]; then
  mkdir -p "$work/source/samples" && ln -sfn "$here/configs" "$work/source/samples/configs"
  export MOEWB_SOURCE_DIR="$work/source"
fi
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on the lent machines (H200.md)
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
      "$here/bin/engine_cuda_tests" --gtest_filter="$filter" --gtest_output="xml:$work/gpu-tests.xml" \
        >"$out/gpu-tests.log" 2>&1 || status=1
      "$here/bin/profiler_cuda_tests" --gtest_filter="$filter" \
        --gtest_output="xml:$work/profiler-gpu-tests.xml" >>"$out/gpu-tests.log" 2>&1 || status=1
      "$here/bin/capture_cuda_tests" --gtest_filter="$filter" \
        --gtest_output="xml:$work/capture-gpu-tests.xml" >>"$out/gpu-tests.log" 2>&1 || status=1
      grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests? ran" "$out/gpu-tests.log" | tail -40 ;;
    memcheck)
      compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 9 \
        "$here/bin/engine_cuda_tests" --gtest_filter="$filter" >"$out/memcheck.log" 2>&1 || status=1
      tail -5 "$out/memcheck.log" ;;
    cli)
      # The CLI end to end on the GPU: a traced run of the tiny config, then its summary.
      "$here/bin/moewb" run -c "$here/configs/tiny.toml" --set run.backend=cuda --steps 100 \
        -o "$work/tiny-cuda.sqlite" -f -q >"$out/cli.log" 2>&1 || status=1
      "$here/bin/moewb" info "$work/tiny-cuda.sqlite" --no-config >>"$out/cli.log" 2>&1 || status=1
      # The same run with CUPTI capture: kernels, copies and NVTX joined to steps and phases.
      "$here/bin/moewb" run -c "$here/configs/small.toml" --set run.backend=cuda --steps 20 \
        --gpu-trace -o "$work/small-gputrace.sqlite" -f -q >>"$out/cli.log" 2>&1 || status=1
      "$here/bin/moewb" info "$work/small-gputrace.sqlite" --no-config >>"$out/cli.log" 2>&1 || status=1
      cp "$work/small-gputrace.sqlite" "$out/"  # ~10 MiB: inspected and rendered at home
      # Capture modes: a step window (CUPTI off outside it) and a flight recorder on step time.
      "$here/bin/moewb" run -c "$here/configs/small.toml" --set run.backend=cuda --steps 40 \
        --gpu-trace --trace-steps 10:15 -o "$work/small-window.sqlite" -f -q >>"$out/cli.log" 2>&1 || status=1
      "$here/bin/moewb" info "$work/small-window.sqlite" --no-config >>"$out/cli.log" 2>&1 || status=1
      "$here/bin/moewb" run -c "$here/configs/small.toml" --set run.backend=cuda --steps 40 \
        --gpu-trace --flight-recorder 4 --trigger-step-ms 20 -o "$work/small-flight.sqlite" -f -q \
        >>"$out/cli.log" 2>&1 || status=1
      "$here/bin/moewb" info "$work/small-flight.sqlite" --no-config >>"$out/cli.log" 2>&1 || status=1
      cat "$out/cli.log" ;;
    capture)
      # moewb capture of a PyTorch script against the PyTorch profiler's kernel count (issue 5).
      python3 "$here/capture-anchor-check.py" --moewb "$here/bin/moewb" \
        --script "$here/anchors/moe_layer.py" --out "$out/capture" >"$out/capture.log" 2>&1 || status=1
      tail -20 "$out/capture.log" ;;
    parallel)
      # Issue 6 on one GPU: 4 virtual ranks (EP = 4) and NCCL with world size 1, both traced.
      m="$here/bin/moewb"
      { "$m" run -c "$here/configs/small.toml" --set run.backend=cuda --ranks 4 --set parallel.ep=4 \
          --steps 20 -o "$work/small-vr4.sqlite" -f -q
        "$m" info "$work/small-vr4.sqlite" --no-config
        sqlite3 "$work/small-vr4.sqlite" "VACUUM INTO '$out/small-vr4.sqlite'" 2>/dev/null ||
          cp "$work/small-vr4.sqlite" "$out/"
        "$m" run -c "$here/configs/small.toml" --set run.backend=cuda --ranks 4 --set parallel.ep=2 \
          --set parallel.fsdp=2 --steps 20 -o "$work/small-vr4-ep2-fsdp2.sqlite" -f -q
        "$m" launch --nproc 1 -- "$m" run -c "$here/configs/small.toml" --set run.backend=cuda \
          --steps 20 -o "$work/small-nccl1.sqlite" -f -q
        "$m" info "$work/small-nccl1.rank0.sqlite" --no-config
        "$m" merge --force -o "$work/small-nccl1-merged.sqlite" "$work/small-nccl1.rank0.sqlite"
        "$here/bin/ep_moe_layer_cuda_bench" --virtual --ranks 2
        "$here/bin/all_to_all_cuda_bench"
      } >"$out/parallel.log" 2>&1 || status=1
      tail -60 "$out/parallel.log" ;;
    multigpu)
      # Issue 7 on a machine with 2+ GPUs: one process per GPU over NCCL.
      m="$here/bin/moewb"
      n=$(nvidia-smi -L | wc -l)
      { for layout in "ep=$n" "fsdp=$n" ; do
          "$m" launch --nproc "$n" -- "$m" run -c "$here/configs/small.toml" --set run.backend=cuda \
            --set "parallel.$layout" --steps 30 -o "$work/small-nccl$n-${layout%%=*}.sqlite" -f -q
        done
        "$m" merge -o "$out/small-nccl$n-ep.sqlite" --force "$work"/small-nccl$n-ep.rank*.sqlite
        "$m" info "$out/small-nccl$n-ep.sqlite" --no-config
        # A killed rank: the others stop within parallel.timeout_ms naming it.
        start=$(date +%s)
        NCCL_DEBUG=WARN "$m" launch --nproc "$n" --grace-s 20 -- bash -c '"$0" run -c "$1" \
          --set run.backend=cuda --set parallel.ep='"$n"' --set parallel.timeout_ms=5000 \
          --steps 100000 -o "$2" -f -q & pid=$!; if [ "$RANK" = 1 ]; then sleep 15; kill -9 $pid; fi
          wait $pid' "$m" "$here/configs/small.toml" "$work/killed.sqlite"
        echo "killed run: launcher exit $?, $(( $(date +%s) - start )) s"
        "$m" info "$work/killed.rank0.sqlite" --no-config | head -4
        "$here/bin/all_to_all_cuda_bench" --sizes moe,sweep
        "$here/bin/moe_layer_cuda_bench"
        "$here/bin/ep_moe_layer_cuda_bench"
        (cd "$here/anchors" && python3 ep_moe_layer.py)
      } >"$out/multigpu.log" 2>&1 || status=1
      tail -80 "$out/multigpu.log" ;;
    scaling)
      # Issue 7: the small and a larger config on 1 GPU and on every GPU (EP = GPUs, one process
      # each), tokens/s and the step breakdown from our own trace (scripts/parallel-breakdown.py).
      m="$here/bin/moewb"
      n=$(nvidia-smi -L | wc -l)
      larger=(--set model.d_model=512 --set model.num_heads=8 --set kda.head_dim=64
              --set moe.num_experts=64 --set moe.top_k=8 --set moe.d_ff=512 --set moe.latent_dim=128
              --set data.batch_size=16 --set model.seq_len=512 --set sparse.indexer_dim=32)
      { for cfg in small larger; do
          extra=(); [[ $cfg == larger ]] && extra=("${larger[@]}")
          "$m" run -c "$here/configs/small.toml" --set run.backend=cuda "${extra[@]}" --steps 30 \
            -o "$work/scale-$cfg-1.sqlite" -f -q >/dev/null
          python3 "$here/parallel-breakdown.py" "$work/scale-$cfg-1.sqlite" --name "$cfg 1 GPU"
          "$m" launch --nproc "$n" -- "$m" run -c "$here/configs/small.toml" --set run.backend=cuda \
            "${extra[@]}" --set "parallel.ep=$n" --steps 30 -o "$work/scale-$cfg-$n.sqlite" -f -q >/dev/null
          "$m" merge --force -o "$work/scale-$cfg-$n.sqlite" "$work"/scale-$cfg-$n.rank*.sqlite >/dev/null
          python3 "$here/parallel-breakdown.py" "$work/scale-$cfg-$n.sqlite" --name "$cfg $n GPUs EP=$n"
        done
      } >"$out/scaling.log" 2>&1 || status=1
      cat "$out/scaling.log" ;;
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
    overhead)
      # Tracing overhead alone: on the training step (small and launch-heavy configs), its floor
      # per kernel (CUPTI on a bare kernel, stream launches vs graph replays), and the PyTorch
      # profiler's overhead on its MoE layer step.
      { "$here/bin/trace_overhead_cuda_bench" "$here/configs/small.toml" --steps 60 --reps 5 \
          --modes untraced,host_memory,cupti_kernel,cupti_launches,cupti_full,cupti_every10,cupti_after
        "$here/bin/cupti_floor_cuda_bench"
        (cd "$here/anchors" && python3 profiler_overhead.py)
      } 2>&1 | tee "$out/overhead.jsonl" ;;
    h200)
      # The realistic one-GPU config: the dense warm-up stage (steps < sparse.warmup_steps) and
      # the sparse stage, each a few steps with the host trace; `moewb run` prints tokens/s and
      # MFU, `moewb info` the phases.
      m="$here/bin/moewb"
      { for stage in dense sparse; do
          extra=(); [[ $stage == sparse ]] && extra=(--set sparse.warmup_steps=0)
          "$m" run -c "$here/configs/h200.toml" --steps "${H200_STEPS:-8}" "${extra[@]}" \
            -o "$work/h200-$stage.sqlite" -f
          "$m" info "$work/h200-$stage.sqlite" --no-config --top 30
        done
      } >"$out/h200.log" 2>&1 || status=1
      grep -E "tokens/s|MFU|steps |speed" "$out/h200.log" ;;
    swap)
      # Issue 16. SWAP_PARTS picks parts (default all three) so they can run in separate device
      # calls when one would pass the time limit.
      parts="${SWAP_PARTS:-tests racecheck bench}"
      if [[ " $parts " == *" tests "* ]]; then
        swapTests='PinnedHostPoolTest.*:CachingAllocatorShadowTest.*:SwapCudaTest.*'
        "$here/bin/engine_cuda_tests" --gtest_filter="$swapTests" >"$out/swap-tests.log" 2>&1 ||
          status=1
        grep -E "^\[  (FAILED|PASSED|SKIPPED|     OK) |tests? ran|^step |^no-swap|target" \
          "$out/swap-tests.log" | tail -40
      fi
      if [[ " $parts " == *" racecheck "* ]]; then
        timeout "${SWAP_RACECHECK_S:-300}" compute-sanitizer --tool racecheck --error-exitcode 9 \
          "$here/bin/engine_cuda_tests" \
          --gtest_filter='SwapCudaTest.TwoStepsWithSwapAreBitwiseThoseWithout' \
          >"$out/racecheck.log" 2>&1 || status=1
        tail -5 "$out/racecheck.log"
      fi
      if [[ " $parts " == *" bench "* ]]; then
        # SWAP_MODES picks bench modes (off,auto,manual); SWAP_TARGET_GB sets auto's target
        # when off is not among them.
        extra=(); [[ -n "${SWAP_TARGET_GB:-}" ]] && extra=(--target-gb "$SWAP_TARGET_GB")
        "$here/bin/swap_cuda_bench" "$here/configs/h200.toml" --steps "${SWAP_STEPS:-6}" \
          --modes "${SWAP_MODES:-off,auto,manual}" "${extra[@]}" \
          >"$out/swap-bench.log" 2>&1 || status=1
        cat "$out/swap-bench.log"
      fi ;;
    *) echo "unknown step $step (accepted: tests, memcheck, cli, capture, parallel, multigpu, scaling, bench, overhead, h200, swap)"
       status=2 ;;
  esac
done
exit $status
