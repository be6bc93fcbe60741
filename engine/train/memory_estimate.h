// Host memory a run needs, estimated from the config before anything is allocated, and the
// refusal `moewb run` and `moewb config` both give when it would not fit this machine.
#pragma once

#include "model/cpu/parameter.h"
#include "moewb/base/status.h"

namespace moewb::engine {

// Rough count of the float parameters: embedding and LM head, four D x D mixer projections and
// the MoE FFN per layer (routed experts at their width, latent down / up, shared experts).
double estimateParameters(const ModelDims& dims);

// Bytes of one step on the CPU backend: fp32 value, grad and two AdamW moments per parameter,
// plus one step's activations per layer by its mixer (attention probabilities [B, H, T, T]; the
// gated sparse layer's probabilities over its key width and the lightning indexer's logits,
// target, probabilities, gradient and selection [N, W], W = T in the dense warm-up stage; KDA's
// per-chunk states), the MoE rows, and the loss head's [N, V] logits.
double estimateCpuTrainingBytes(const ModelDims& dims);

// Bytes of the host copy of a CUDA run: fp32 value, grad and two moments per parameter (the
// activations live on the device).
double estimateHostStateBytes(const ModelDims& dims);

// Device bytes the CUDA backend's KDA layers keep per step beyond what they keep with
// kda.keep_intermediates = false (0 then, and on the CPU backend, whose KDA backward always
// recomputes): per KDA layer fp32 W, U, q ⊙ e^G, k ⊙ e^{G_C - G}, Vn ([B*H*T', K or V] each,
// T' = seq_len rounded up to kda.chunk_size), e^{G_C} [B*H*NC, K] and the chunk-entry states
// [B*H*NC, K, V] (kdaKeptIntermediateBytes of kda_cuda.h, the same count). Held from the layer's
// forward to its backward, so the peak holds every KDA layer's. Not part of checkHostMemory
// (device memory; this build has no device-memory estimate to add it to).
double estimateKdaKeptBytes(const ModelDims& dims);

// Whether a one-rank run of `config` takes the CPU backend: run.backend = "cpu", or "auto"
// without a CUDA device (or without the CUDA backend in this build).
bool runsOnCpuBackend(const RunConfig& config);

// This machine's physical memory in bytes (0 when unknown).
double physicalMemoryBytes();

// Ok when the estimate for the backend (`onCpu`: the CPU model and its activations, else the
// host copy of a GPU run) is at most half of `memoryBytes` (or `memoryBytes` is 0). Otherwise an
// invalid-argument Status naming both sizes and the keys that reduce the need.
Status checkHostMemory(const ModelDims& dims, bool onCpu, double memoryBytes);

}  // namespace moewb::engine
