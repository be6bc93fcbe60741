#!/usr/bin/env bash
# Round 5b sweep (bench/scratch/grouped_gemm_05.md, "Round 5b"): builds grouped_gemm_05.cu once
# per compile-time variant of engine/ops/experts/grouped_gemm_ws_cuda.cuh (-D macros), all builds
# in parallel, runs each binary in `sweep` mode (awkward shapes + balanced benchmark shape: fp32
# reference, ws vs round 2 bitwise, ws run to run, timing) one after another as its build
# finishes, and prints one table: variant x stage ms (TFLOP/s), bitwise vs round 2, pass.
# Usage (repository root, H200): bench/scratch/grouped_gemm_05_sweep.sh LOGDIR [VARIANT...]
#   LOGDIR: build and run logs, the table (sweep_table.md); VARIANTs: names below (default all).
set -u
LOG=${1:?usage: grouped_gemm_05_sweep.sh LOGDIR [VARIANT...]}
shift
mkdir -p "$LOG"
BIN=${SWEEP_BIN:-.scratch/bin/sweep05}
mkdir -p "$BIN"
NVCC=${NVCC:-nvcc}
command -v "$NVCC" >/dev/null || NVCC=/usr/local/cuda/bin/nvcc

# name: -D flags. r5a = the first iteration as measured (k1_run.log); the rest change one or two
# things at a time (see the .md for what each tests and the prediction).
declare -A DEFS=(
  [r5a]="-DMOEWB_WS_PRODUCER=0 -DMOEWB_WS_DH_CHUNK=1 -DMOEWB_WS_EPI_PREFETCH=0"
  [dhfix]="-DMOEWB_WS_PRODUCER=0 -DMOEWB_WS_DH_CHUNK=8 -DMOEWB_WS_EPI_PREFETCH=0"
  [rel0_p0]="-DMOEWB_WS_PRODUCER=0 -DMOEWB_WS_DH_CHUNK=8 -DMOEWB_WS_EPI_PREFETCH=0
    -DMOEWB_WS_RELEASE=0"
  [prod]="-DMOEWB_WS_PRODUCER=1 -DMOEWB_WS_DH_CHUNK=8 -DMOEWB_WS_EPI_PREFETCH=0"
  [default]=""
  [rel0]="-DMOEWB_WS_RELEASE=0"
  [st3]="-DMOEWB_WS_STAGES=3"
  [regs40]="-DMOEWB_WS_PRODUCER_REGS=40 -DMOEWB_WS_CONSUMER_REGS=232"
  [tma]="-DMOEWB_WS_TMA_B=1"
  [tma_rel0]="-DMOEWB_WS_TMA_B=1 -DMOEWB_WS_RELEASE=0"
)
# Default set (8 variants, about 5 minutes on the H200); rel0_p0 and regs40 by name.
ORDER=(default tma tma_rel0 rel0 prod dhfix r5a st3)  # most informative first
if [ $# -gt 0 ]; then ORDER=("$@"); fi

for v in "${ORDER[@]}"; do
  [ -n "${DEFS[$v]+x}" ] || { echo "unknown variant $v (known: ${!DEFS[*]})"; exit 2; }
done

echo "building ${#ORDER[@]} variants in parallel: ${ORDER[*]}"
declare -A PID
for v in "${ORDER[@]}"; do
  # shellcheck disable=SC2086
  ( "$NVCC" -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xptxas -v \
      -Iengine -Iengine/include -Ibase/include ${DEFS[$v]} -o "$BIN/gg05_$v" \
      bench/scratch/grouped_gemm_05.cu >"$LOG/build_$v.log" 2>&1 ) &
  PID[$v]=$!
done

for v in "${ORDER[@]}"; do
  if ! wait "${PID[$v]}"; then
    echo "BUILD FAILED: $v (tail of $LOG/build_$v.log)"
    tail -5 "$LOG/build_$v.log"
    continue
  fi
  grep -A1 "grouped_ws_kernel" "$LOG/build_$v.log" | grep -o "[0-9]* bytes spill stores" \
    | sort -u | tr '\n' ' ' | sed "s/^/spills $v: /"
  echo
  if [ "$SECONDS" -gt "${SWEEP_BUDGET_S:-500}" ]; then  # keep the whole call under 10 minutes
    echo "skipped $v: ${SECONDS} s used (SWEEP_BUDGET_S ${SWEEP_BUDGET_S:-500})"
    continue
  fi
  start=$(date +%s)
  timeout 90 "$BIN/gg05_$v" sweep >"$LOG/run_$v.log" 2>&1
  echo "ran $v: rc=$? in $(( $(date +%s) - start )) s"
done

# Table. Stages as the benchmark names them; balanced shape only.
STAGES="fc1_gate_up fc2_down fc2_down_rowweight dgrad_dh dgrad_dx"
{
  printf "| variant |"
  for s in $STAGES; do printf " %s ms (TF/s) |" "$s"; done
  printf " sum ms | bitwise vs r2 | all checks |\n|---|"
  for s in $STAGES; do printf -- "---|"; done
  printf -- "---|---|---|\n"
  first=1
  for v in "${ORDER[@]}"; do
    f="$LOG/run_$v.log"
    [ -f "$f" ] || { echo "| $v | (no run) |"; continue; }
    if [ $first = 1 ]; then  # round 2 from the first variant's binary (the same kernels in all)
      printf "| round 2 |"
      sum=0
      for s in $STAGES; do
        l=$(grep "name=time_r2_${s} shape=balanced" "$f" | head -1)
        ms=$(sed -n 's/.* ms=\([0-9.]*\).*/\1/p' <<<"$l")
        tf=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' <<<"$l")
        printf " %s (%s) |" "${ms:-?}" "${tf:-?}"
        [ "$s" = fc2_down_rowweight ] || sum=$(awk -v a="$sum" -v b="${ms:-0}" 'BEGIN{print a+b}')
      done
      printf " %s | - | - |\n" "$sum"
      first=0
    fi
    printf "| %s |" "$v"
    sum=0
    for s in $STAGES; do
      l=$(grep "name=time_ws_${s} shape=balanced" "$f" | head -1)
      ms=$(sed -n 's/.* ms=\([0-9.]*\).*/\1/p' <<<"$l")
      tf=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' <<<"$l")
      printf " %s (%s) |" "${ms:-?}" "${tf:-?}"
      [ "$s" = fc2_down_rowweight ] || sum=$(awk -v a="$sum" -v b="${ms:-0}" 'BEGIN{print a+b}')
    done
    yes=$(grep -c "ws_vs_r2_bitwise_.*bitwise_equal=yes" "$f")
    no=$(grep -c "ws_vs_r2_bitwise_.*bitwise_equal=no" "$f")
    nfail=$(grep -c 'status=FAIL' "$f")
    pass=$(grep -q "^ALL PASS" "$f" && echo "ALL PASS" || echo "FAIL ($nfail lines)")
    printf " %s | %s/%s equal | %s |\n" "$sum" "$yes" "$((yes + no))" "$pass"
  done
  echo
  echo "sum ms: fc1 + fc2 (plain) + dh + dx, balanced. bitwise: ws_vs_r2_bitwise lines equal / all."
} | tee "$LOG/sweep_table.md"
