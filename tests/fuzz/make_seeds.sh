#!/usr/bin/env bash
# Rewrites the seed corpora of tests/fuzz/corpus/ from real outputs of the sample configs:
#   config/        the sample configs themselves
#   trace_reader/  traces of samples/configs/tiny.toml shrunk (the fuzz model, fuzz_model.h), one
#                  rank and --ranks 2, 2 steps, re-paged to 512-byte pages (VACUUM) so a seed is
#                  ~40 KB instead of ~160 KB and mutations land in fewer, denser pages; and the
#                  one-rank trace with the GPU rows of gpu_rows.sql (why: see that file)
#   safetensors/   a checkpoint and an alignment dump of the same model (fuzz_model.h's table)
# Usage: tests/fuzz/make_seeds.sh [MOEWB]   (MOEWB: the CLI to run, default build/cli/moewb)
set -euo pipefail
cd "$(dirname "$0")/../.."
moewb=${1:-build/cli/moewb}
corpus=tests/fuzz/corpus
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# kFuzzModelOverrides of tests/fuzz/fuzz_model.h.
overrides=(run.threads=1 model.vocab_size=16 model.d_model=8 model.num_layers=1 model.num_heads=2
           model.seq_len=4 moe.num_experts=4 moe.top_k=2 moe.d_ff=8 moe.bias_update_rate=0.01
           data.batch_size=2 data.num_topics=4 run.steps=2)
sets=()
for o in "${overrides[@]}"; do sets+=(--set "$o"); done

"$moewb" run -c samples/configs/tiny.toml "${sets[@]}" -o "$work/one.sqlite" \
  --checkpoint-every 1 --checkpoint-dir "$work/ckpt" --dump-steps 0:2 --dump-dir "$work/dump" >/dev/null
"$moewb" run -c samples/configs/tiny.toml "${sets[@]}" --ranks 2 -o "$work/two.sqlite" >/dev/null
for f in one two; do
  sqlite3 "$work/$f.sqlite" "PRAGMA journal_mode=DELETE; PRAGMA page_size=512; VACUUM;" >/dev/null
done
cp "$work/one.sqlite" "$work/gpu.sqlite"
sqlite3 "$work/gpu.sqlite" < tests/fuzz/gpu_rows.sql
sqlite3 "$work/gpu.sqlite" "VACUUM;"

rm -f "$corpus"/config/* "$corpus"/trace_reader/* "$corpus"/safetensors/*
mkdir -p "$corpus"/{config,trace_reader,safetensors}
cp samples/configs/*.toml "$corpus/config/"
cp "$work/one.sqlite" "$corpus/trace_reader/one_rank.sqlite"
cp "$work/two.sqlite" "$corpus/trace_reader/two_ranks.sqlite"
cp "$work/gpu.sqlite" "$corpus/trace_reader/gpu_rows.sqlite"
cp "$work/ckpt/step-00000002.safetensors" "$corpus/safetensors/checkpoint.safetensors"
cp "$work/dump/step-00000001.safetensors" "$corpus/safetensors/dump.safetensors"
ls -l "$corpus"/*
