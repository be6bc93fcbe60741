#!/usr/bin/env bash
# One ncu profile per kernel family (one launch at the benchmark shape), to name what limits it
# (bench/RESULTS.md, "What limits each now"). Run on the GPU machine from a folder holding bin/
# with the scratch binaries built as their first comment line says; OUT receives ncu.tgz.
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:$LD_LIBRARY_PATH
cd "$(dirname "$0")"; logs=/tmp/ncu; mkdir -p $logs
prof() {  # name binary kernel-regex skip
  timeout 100 ncu --clock-control none --kernel-name-base demangled -k "regex:$3" --launch-skip "$4" \
    --launch-count 1 --kill yes --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy \
    "bin/$2" > "$logs/$1.txt" 2>&1
  echo "== $1 rc=$?"; grep -E "Grid Size|Block Size|Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Throughput|Executed Ipc A|Achieved Occupancy|Theoretical Occupancy|Registers Per|Shared Memory Configuration Size|Issue Slots Busy|Warp Cycles Per Issued|^    [A-Z][a-z]+ .*stall" "$logs/$1.txt" | head -16
  grep -E "OPT|WRN" -A2 "$logs/$1.txt" | grep -v "^--" | cut -c1-220 | head -12
}
prof flash_fwd flash_attention_01 "flash::flash_attention_fwd_kernel" 12
prof flash_dkdv flash_attention_01 "flash::flash_attention_bwd_dkdv_kernel" 12
prof gemm_fc1_v2 grouped_gemm_02 "v2::grouped_fwd_gate_up_kernel" 16
prof kda_bwd kda_chunk_02 "kda_bwd_mma_kernel" 40
tar czf $OUT/ncu.tgz -C $logs .
