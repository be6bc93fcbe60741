// CudaFsdpShards: FSDP on the GPU, the device twin of parallel/fsdp_shards.h (same chunking, same
// groups, same 1 / world_size gradient scale, so GPU ranks reproduce the CPU ranks' math).
//
// Every trainable parameter of the CudaModel is flattened, zero-padded to a multiple of its
// group's size G and cut into G chunks; this rank owns chunk g = its group rank: an fp32 master
// shard, its gradient and AdamW moments ([chunk] each). Dense parameters are sharded over the
// dense shard group and replicated over the replicate group; routed expert parameters (already
// split over EP ranks) over the expert-data-parallel group.
// gather(unit): device all-gather of the unit's master shards into the full fp32 masters, then
// their bf16 compute copies. reduce(unit): device reduce-scatter of the unit's full gradients into
// the shard gradients (then all-reduce over the replicate group, then scale by 1 / world_size).
// The optimizer runs on denseShards() and expertShards() only; the full parameters keep their
// value and gradient buffers between uses (their moments are released).
// Costs per unit and step: one all-gather and one reduce-scatter of the unit's parameters per
// group, two strided copies per parameter each way. Failures are returned (collectives: the
// communicator's kCancelled naming a missing rank). One rank's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "model/cuda/cuda_parameters.h"
#include "model/cpu/model.h"
#include "model/parallel/fsdp_shards.h"

namespace moewb::engine::cuda {

class CudaFsdpShards {
 public:
  // Takes this rank's shards of `full`'s current values (identical on every rank) and releases
  // the full parameters' moments. `host` gives each parameter's unit and whether it is an expert
  // parameter (same order as `full`). `full` and the groups must outlive this object.
  static Result<std::unique_ptr<CudaFsdpShards>> create(CudaContext& context,
                                                        const Model<float>& host,
                                                        CudaParameters& full,
                                                        const FsdpGroups& groups);

  // All-gathers the shards of `unit` (-1: embedding, head, final norm) into the full parameters.
  Status gather(int32_t unit);
  // Reduce-scatters the full gradients of `unit` into the shard gradients (see above).
  Status reduce(int32_t unit);

  CudaParameters& denseShards() { return m_dense; }
  CudaParameters& expertShards() { return m_expert; }
  // True when this rank's dense shard gradients count towards the global norm (first replica).
  bool countsDenseNorm() const;
  // Bytes of the shards' values + gradients, and of their moments.
  int64_t shardBytes() const;
  int64_t optimizerBytes() const;

 private:
  struct Bucket {
    Communicator* group = nullptr;
    bool dense = true;
    std::vector<size_t> params;  // indices into the full parameters
    std::vector<size_t> shards;  // indices into m_dense or m_expert
    std::vector<int64_t> chunk;  // [params] elements per chunk
    int64_t chunkSum = 0;
  };
  CudaFsdpShards(CudaContext& context, CudaParameters& full, const FsdpGroups& groups)
      : m_context(context), m_full(full), m_groups(groups) {}
  CudaParameter& shardOf(const Bucket& bucket, size_t j);
  Status gatherBucket(Bucket& bucket);
  Status reduceBucket(Bucket& bucket);

  CudaContext& m_context;
  CudaParameters& m_full;
  FsdpGroups m_groups;
  CudaParameters m_dense, m_expert;
  std::vector<std::vector<Bucket>> m_buckets;  // [unit + 1] dense then expert bucket
};

}  // namespace moewb::engine::cuda
