// FsdpShards: the FSDP state of one rank's Model<float> (ENGINE-MATH §5.9, FSDP2 + EP).
//
// Every trainable parameter is flattened, zero-padded to a multiple of its group's size G and cut
// into G equal chunks; this rank owns chunk g = its group rank: the shard's value, gradient and
// AdamW moments (one Parameter<float> per model parameter, shape [chunk]). Dense parameters are
// sharded over the dense shard group (parallel.fsdp consecutive ranks) and replicated over the
// replicate group; routed expert parameters (already split over EP ranks) are sharded over the
// expert-data-parallel group (the ranks holding the same experts).
// Units: the parameters of one decoder layer, or unit -1 (embedding, head, final norm). gather(u)
// all-gathers the unit's shards into the model's full parameter values (one collective per unit
// and group); reduce(u) reduce-scatters the unit's full gradients into the shards' gradients
// (summed, then all-reduced over the replicate group, then scaled by 1 / world_size: each rank's
// loss is the mean over its N / world_size tokens, so this is the gradient of the mean over the
// global batch). The optimizer then runs on the shards only. The model keeps its full value and
// gradient buffers between uses (no freeing); its AdamW moments are released.
// Costs: per unit and step one all-gather and one reduce-scatter of the unit's parameters.
// Failures throw CollectiveError. One rank's thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/cpu/model.h"

namespace moewb::engine {

// Elements per chunk when a flat tensor of `numel` elements is cut over `groupSize` ranks:
// ceil(numel / groupSize). Chunk g covers [g * chunk, min((g + 1) * chunk, numel)), the rest of
// it is zero padding. The one rule of the CPU shards, the GPU shards and the re-shard.
inline int64_t fsdpChunkElements(int64_t numel, int64_t groupSize) {
  return (numel + groupSize - 1) / groupSize;
}

struct FsdpGroups {
  Communicator* denseShard = nullptr;      // parallel.fsdp ranks sharding dense parameters
  Communicator* denseReplicate = nullptr;  // parallel.replicate ranks holding the same shard
  Communicator* expertShard = nullptr;     // world_size / ep ranks holding the same experts
  int32_t worldSize = 1;
};

class FsdpShards {
 public:
  // Takes this rank's shards of the model's current (initialised, identical on every rank)
  // values and releases the model's moments. The groups must outlive this object.
  FsdpShards(Model<float>& model, const FsdpGroups& groups);

  // All-gathers the shards of `unit` into the model's parameter values.
  void gather(int32_t unit);
  // Reduce-scatters the model's gradients of `unit` into the shards' gradients (see above).
  void reduce(int32_t unit);

  // One Parameter per trainable model parameter, in model order: value / grad / moments [chunk].
  std::vector<Parameter<float>>& shards() { return m_shards; }
  // Sum of squared shard gradients, counting dense shards only on the first replica so that the
  // sum over all ranks is the squared global gradient norm.
  double localGradSquares() const;
  // Bytes of the shards' values, gradients and moments.
  int64_t valueBytes() const;
  int64_t gradBytes() const;
  int64_t optimizerBytes() const;

 private:
  struct Bucket {
    Communicator* group = nullptr;
    bool dense = true;
    std::vector<size_t> params;  // model parameter indices
    std::vector<size_t> shards;  // matching indices into m_shards
    std::vector<int64_t> chunk;  // [params] elements per chunk
    int64_t chunkSum = 0;        // sum of chunk
  };
  void addToBucket(int32_t unit, bool dense, size_t param, size_t shard);

  Model<float>& m_model;
  FsdpGroups m_groups;
  std::vector<Parameter<float>> m_shards;
  std::vector<std::vector<Bucket>> m_buckets;  // [unit + 1] dense then expert bucket
};

}  // namespace moewb::engine
