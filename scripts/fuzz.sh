#!/usr/bin/env bash
# Runs the libFuzzer targets for a while in parallel jobs and prints, per target, the executions
# (summed over the jobs' final stats), the crash / leak / timeout / out-of-memory artifacts and
# the largest coverage reached. Each target starts from a working copy of its seeds in
# tests/fuzz/corpus (the copies grow; the seeds are not touched). See docs/TESTING.md.
#   scripts/fuzz.sh BIN_DIR SECONDS TARGET:JOBS...
#     BIN_DIR   where config_fuzzer, trace_reader_fuzzer, safetensors_fuzzer are (e.g.
#               build-fuzz/tests/fuzz)
#     SECONDS   how long each job runs (-max_total_time)
#     TARGET    config, trace_reader or safetensors; JOBS parallel jobs of it
# Environment: FUZZ_CPUS (taskset list, default: every CPU), FUZZ_WORK (default
# /dev/shm/moewb-fuzz: corpora, logs, artifacts). Jobs run at nice 19. Exit status 1 when any
# target left an artifact.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/fuzz.sh BIN_DIR SECONDS TARGET:JOBS... (targets: config, trace_reader, safetensors)"
[[ $# -ge 3 ]] || { echo "$usage" >&2; exit 2; }
bin=$1 secs=$2; shift 2
[[ -d "$bin" ]] || { echo "fuzz.sh: BIN_DIR '$bin' is not a directory" >&2; exit 2; }
bin=$(realpath "$bin")
[[ "$secs" =~ ^[0-9]+$ && "$secs" -gt 0 ]] || { echo "fuzz.sh: SECONDS '$secs' is not a positive integer" >&2; exit 2; }
work=${FUZZ_WORK:-/dev/shm/moewb-fuzz}
cpus=${FUZZ_CPUS:-0-$(( $(nproc) - 1 ))}
targets=()
for spec in "$@"; do
  t=${spec%%:*} n=${spec##*:}
  case "$t" in config|trace_reader|safetensors) ;; *) echo "fuzz.sh: unknown target '$t'; $usage" >&2; exit 2 ;; esac
  [[ "$n" =~ ^[0-9]+$ && "$n" -gt 0 ]] || { echo "fuzz.sh: jobs '$n' for $t is not a positive integer" >&2; exit 2; }
  [[ -x "$bin/${t}_fuzzer" ]] || { echo "fuzz.sh: no executable $bin/${t}_fuzzer (build it: docs/TESTING.md)" >&2; exit 2; }
  rm -rf "$work/$t" && mkdir -p "$work/$t/corpus" "$work/$t/artifacts" "$work/$t/logs"
  cp -r tests/fuzz/corpus/"$t"/. "$work/$t/corpus/"
  # -jobs writes fuzz-<i>.log into the working directory; TMPDIR holds the targets' temp files.
  (cd "$work/$t/logs" && TMPDIR="$work/$t" nice -n 19 taskset -c "$cpus" \
     "$bin/${t}_fuzzer" -jobs="$n" -workers="$n" -max_total_time="$secs" \
     -timeout=30 -print_final_stats=1 -artifact_prefix="$work/$t/artifacts/" "$work/$t/corpus" \
     > main.log 2>&1) &
  targets+=("$t")
done
wait
status=0
for t in "${targets[@]}"; do
  execs=$(awk '/stat::number_of_executed_units/ {s += $2} END {print s + 0}' "$work/$t"/logs/fuzz-*.log)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' "$work/$t"/logs/fuzz-*.log | sort -n | tail -1)
  artifacts=$(find "$work/$t/artifacts" -type f | wc -l)
  echo "fuzz $t: executions $execs, artifacts $artifacts, coverage ${cov:-0} edges, corpus $(ls "$work/$t/corpus" | wc -l)"
  [[ "$artifacts" -eq 0 ]] || status=1
done
exit $status
