// The op registry: every implementation of every op (engine/ops/<op>/) with its backend, where it
// lives, its dtypes and its limits, and a check of those limits against a concrete model. Tests
// sweep it (every op folder has a reference; every limit names the key it concerns), benchmarks
// and the tuner list it, and the CUDA model asks it whether a config runs on the GPU
// (CudaModel::checkSupported, and so run.backend = "auto") instead of a hand-written check.
//
// The list is built once (static, immutable) and read from any thread. CUDA entries are present
// only in builds with MOEWB_CUDA (the kernels exist only there).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moewb/base/status.h"

namespace moewb::engine {

enum class OpBackend : uint8_t {
  kReference,  // <op>_ref.cpp: plain fp32/fp64 loops, the ground truth, always built
  kCpu,        // <op>_cpu.cpp: a faster CPU form checked against the reference
  kCuda,       // <op>_cuda.{cpp,cu}: bf16 activations, fp32 accumulation on the GPU
};

// "reference", "cpu", "cuda".
std::string_view opBackendName(OpBackend backend);

// What an implementation's limits are checked against: the settings of one model that decide
// which ops run and at which sizes (filled by the model from its dims).
struct OpProblem {
  std::string mixerPattern;     // model.mixer_pattern: A attention, K KDA, S gated sparse
  int64_t kdaHeadDim = 0;       // resolved KDA key/value head width
  int64_t kdaChunk = 0;         // kda.chunk_size
  std::string lossKind;         // loss.kind: dense, chunk, cce
  bool lora = false;            // lora.enabled
  bool attnRes = false;         // model.residual = attnres
  bool images = false;          // data.image_size > 0 (patch embedding)
};

struct OpImplementation {
  std::string_view op;          // the op folder's name, e.g. "kda"
  OpBackend backend;
  std::string_view files;       // where it lives, e.g. "ops/kda/kda_chunk_cuda.{cpp,cu}"
  std::string_view dtypes;      // e.g. "bf16 q/k/v, fp32 gates, state and accumulation"
  std::string_view limits;      // plain words, "" when none
  // ok, or kUnimplemented naming the config key, its value and what this implementation takes.
  // Null when the implementation has no limits beyond the config's own validation.
  Status (*check)(const OpProblem& problem) = nullptr;
};

// Every registered implementation, ops in alphabetical order, reference first within an op.
const std::vector<OpImplementation>& opImplementations();

// The implementation of `op` on `backend`, or null when there is none.
const OpImplementation* findOpImplementation(std::string_view op, OpBackend backend);

// ok when the mixer of model.mixer_pattern letter `kind` (A attention, K kda, S sparse_attention)
// has an implementation on `backend` whose limits hold for `problem`; otherwise kUnimplemented
// naming the letter, or the key and what the implementation takes. Cheap: looks at one op, so a
// model can call it at every mixer call (live patches change the settings it checks).
Status checkMixerSupported(char kind, OpBackend backend, const OpProblem& problem);

// The ops a model with `problem`'s settings runs (mixers of the pattern, loss head, MoE stages,
// norms, optimizer, LoRA, AttnRes and patch embedding when enabled), sorted.
std::vector<std::string> opsUsedBy(const OpProblem& problem);

// ok when every op the model uses has an implementation on `backend` whose limits hold;
// otherwise kUnimplemented with the first op that does not, its key and what it takes.
Status checkOpsSupported(OpBackend backend, const OpProblem& problem);

}  // namespace moewb::engine
