// What a parallel driver (engine/train/parallel) plugs into a Model: the communicators of expert
// parallelism and of the global router statistics, hooks around the use of each parameter unit
// (FSDP all-gather before, reduce-scatter after), and a tag naming the layer and dispatch phase of
// the collective in progress (for the trace). A model without them is the single-rank model.
// Collective failures inside the model are thrown as CollectiveError (parallel/collective_error.h).
#pragma once

#include <cstdint>

namespace moewb::engine {

class Communicator;

// The layer and dispatch phase ("dispatch", "combine", ...) of the collective in progress.
struct CommTag {
  int32_t layer = -1;        // decoder layer, -1 outside the layers
  const char* phase = "";    // EP all-to-all phase, "" for other collectives
};

// Called on the model's thread. unit = a decoder layer, or -1 for the embedding and head
// parameters. May throw CollectiveError.
class ModelHooks {
 public:
  virtual ~ModelHooks() = default;
  // Before the forward first reads the parameters of `unit`.
  virtual void beforeForward(int32_t unit) = 0;
  // After the backward has produced every gradient of `unit`.
  virtual void afterBackward(int32_t unit) = 0;
};

struct ModelParallel {
  Communicator* ep = nullptr;     // expert-parallel group (ranks exchanging tokens); null = none
  Communicator* world = nullptr;  // every rank: global Switch-loss statistics; null = one rank
  ModelHooks* hooks = nullptr;    // null = none
  CommTag* tag = nullptr;         // null = untagged
  int32_t a2aChunks = 1;          // GPU: EP all-to-all / expert overlap chunks (parallel.a2a_chunks)
};

}  // namespace moewb::engine
