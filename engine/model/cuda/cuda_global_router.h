// The Switch load-balancing loss over the global batch on the GPU (ENGINE-MATH §5.9; the CPU twin
// is parallel/global_router_stats.h): the expert counts and probability sums of every rank are
// all-reduced so each rank holds the loss of the global batch, and the backward reads the global
// counts scaled by N_r / N so that, with the trainer's 1 / world_size weight per rank, the
// gradient is that of the global loss.
// Costs per layer: one column-sum kernel over probs [N, E], one device all-reduce of 2E + 1
// floats, one tiny kernel; no host synchronisation. Every rank must route the same number of
// tokens (data.batch_size is a multiple of the ranks).
#pragma once

#include "comm/communicator.h"
#include "runtime/cuda/cuda_context.h"
#include "ops/router/router_cuda.h"

namespace moewb::engine::cuda {

// Replaces aux.loss with the global Switch loss alpha E sum_e f_e P_e and sets aux.gradCounts /
// gradCountScale; aux.counts stays this rank's (the per-rank expert load of the trace).
// Errors: the communicator's, kResourceExhausted, kInternal.
Status globalizeSwitchLossCuda(CudaContext& context, Communicator& world, double alpha,
                               const DeviceRouterOutput& route, DeviceAuxLoss& aux);

}  // namespace moewb::engine::cuda
