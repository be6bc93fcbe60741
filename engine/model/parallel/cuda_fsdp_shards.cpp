// FSDP shards on the GPU: chunking, device all-gather of values and reduce-scatter of gradients
// per unit (see cuda_fsdp_shards.h; the CPU twin is parallel/fsdp_shards.cpp).
#include "model/parallel/cuda_fsdp_shards.h"

#include <algorithm>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/elementwise.h"

namespace moewb::engine::cuda {
namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Chunk r of a flat [numel] tensor, for r < G: rows [0, fullRows) hold `chunk` elements, row
// fullRows (if < G) the `tail` rest, later rows nothing (zero padding).
struct ChunkRows {
  int64_t fullRows = 0;
  int64_t tail = 0;
};

ChunkRows chunkRows(int64_t numel, int64_t chunk, int64_t groupSize) {
  ChunkRows rows;
  if (chunk == 0) return rows;
  rows.fullRows = std::min(groupSize, numel / chunk);
  rows.tail = rows.fullRows < groupSize ? numel - rows.fullRows * chunk : 0;
  return rows;
}

// Between a flat parameter [numel] and column block `column` of a [G, rowElems] buffer.
Status copyChunks(cudaStream_t stream, float* flat, int64_t numel, int64_t chunk, int64_t groupSize,
                  float* buffer, int64_t rowElems, int64_t column, bool toBuffer) {
  const ChunkRows rows = chunkRows(numel, chunk, groupSize);
  const size_t rowBytes = size_t(chunk) * sizeof(float), bufPitch = size_t(rowElems) * sizeof(float);
  float* block = buffer + column;
  if (rows.fullRows > 0) {
    if (toBuffer) {
      MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(block, bufPitch, flat, rowBytes, rowBytes,
                                                   size_t(rows.fullRows),
                                                   cudaMemcpyDeviceToDevice, stream));
    } else {
      MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(flat, rowBytes, block, bufPitch, rowBytes,
                                                   size_t(rows.fullRows),
                                                   cudaMemcpyDeviceToDevice, stream));
    }
  }
  if (rows.tail > 0) {
    float* flatTail = flat + rows.fullRows * chunk;
    float* bufTail = block + rows.fullRows * rowElems;
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(toBuffer ? bufTail : flatTail,
                                               toBuffer ? flatTail : bufTail,
                                               size_t(rows.tail) * sizeof(float),
                                               cudaMemcpyDeviceToDevice, stream));
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<CudaFsdpShards>> CudaFsdpShards::create(CudaContext& context,
                                                               const Model<float>& host,
                                                               CudaParameters& full,
                                                               const FsdpGroups& groups) {
  std::unique_ptr<CudaFsdpShards> shards(new CudaFsdpShards(context, full, groups));
  shards->m_buckets.resize(size_t(host.dims().numLayers) + 1);
  std::vector<CudaParameter> dense, expert;
  std::vector<std::pair<size_t, bool>> placed;  // [full param] (shard index, dense)
  for (size_t i = 0; i < full.all().size(); ++i) {
    CudaParameter& p = full.all()[i];
    if (!p.trainable) continue;
    const bool isDense = !host.isExpertSharded(i);
    Communicator* group = isDense ? groups.denseShard : groups.expertShard;
    const int64_t g = group->worldSize(), numel = p.master.numel(), chunk = ceilDiv(numel, g);
    const int64_t first = std::min(group->rank() * chunk, numel);
    const int64_t end = std::min(first + chunk, numel);
    CudaParameter shard;
    shard.name = p.name;
    shard.shape = {chunk};
    shard.decay = p.decay;
    MOEWB_ASSIGN_OR_RETURN(shard.master, context.newTensor<float>({chunk}, MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_RETURN(shard.compute, context.newTensor<bf16>({chunk}, MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_RETURN(shard.grad, context.newTensor<float>({chunk}, MemoryCategory::kGrads));
    MOEWB_ASSIGN_OR_RETURN(shard.adamM, context.newTensor<float>({chunk}, MemoryCategory::kOptimizer));
    MOEWB_ASSIGN_OR_RETURN(shard.adamV, context.newTensor<float>({chunk}, MemoryCategory::kOptimizer));
    MOEWB_RETURN_IF_ERROR(fillFloat(context.stream(), shard.master.data(), 0.0f, chunk));
    MOEWB_RETURN_IF_ERROR(fillFloat(context.stream(), shard.grad.data(), 0.0f, chunk));
    MOEWB_RETURN_IF_ERROR(fillFloat(context.stream(), shard.adamM.data(), 0.0f, chunk));
    MOEWB_RETURN_IF_ERROR(fillFloat(context.stream(), shard.adamV.data(), 0.0f, chunk));
    if (end > first) {
      MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(shard.master.data(), p.master.data() + first,
                                                 size_t(end - first) * sizeof(float),
                                                 cudaMemcpyDeviceToDevice, context.stream()));
    }
    p.adamM = DeviceTensor<float>();
    p.adamV = DeviceTensor<float>();
    std::vector<CudaParameter>& list = isDense ? dense : expert;
    list.push_back(std::move(shard));
    std::vector<Bucket>& buckets = shards->m_buckets[size_t(host.unitOf(i) + 1)];
    if (buckets.empty()) {
      buckets.resize(2);
      buckets[0].group = groups.denseShard;
      buckets[1].group = groups.expertShard;
      buckets[1].dense = false;
    }
    Bucket& bucket = buckets[isDense ? 0 : 1];
    bucket.params.push_back(i);
    bucket.shards.push_back(list.size() - 1);
    bucket.chunk.push_back(chunk);
    bucket.chunkSum += chunk;
  }
  shards->m_dense = CudaParameters::adopt(std::move(dense));
  shards->m_expert = CudaParameters::adopt(std::move(expert));
  MOEWB_RETURN_IF_ERROR(context.synchronize());
  return shards;
}

CudaParameter& CudaFsdpShards::shardOf(const Bucket& bucket, size_t j) {
  return (bucket.dense ? m_dense : m_expert).all()[bucket.shards[j]];
}

bool CudaFsdpShards::countsDenseNorm() const {
  return m_groups.denseReplicate == nullptr || m_groups.denseReplicate->rank() == 0;
}

Status CudaFsdpShards::gather(int32_t unit) {
  for (Bucket& bucket : m_buckets[size_t(unit + 1)]) {
    if (!bucket.params.empty()) MOEWB_RETURN_IF_ERROR(gatherBucket(bucket));
  }
  return Status::ok();
}

Status CudaFsdpShards::reduce(int32_t unit) {
  for (Bucket& bucket : m_buckets[size_t(unit + 1)]) {
    if (!bucket.params.empty()) MOEWB_RETURN_IF_ERROR(reduceBucket(bucket));
  }
  return Status::ok();
}

Status CudaFsdpShards::gatherBucket(Bucket& bucket) {
  cudaStream_t stream = m_context.stream();
  const int64_t g = bucket.group->worldSize();
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> send, m_context.newTensor<float>(
                                                       {bucket.chunkSum}, MemoryCategory::kWorkspace));
  int64_t offset = 0;
  for (size_t j = 0; j < bucket.params.size(); ++j) {
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(send.data() + offset, shardOf(bucket, j).master.data(),
                                               size_t(bucket.chunk[j]) * sizeof(float),
                                               cudaMemcpyDeviceToDevice, stream));
    offset += bucket.chunk[j];
  }
  DeviceTensor<float> recv;  // [G, chunkSum]
  if (g == 1) {
    recv = std::move(send);
  } else {
    MOEWB_ASSIGN_OR_RETURN(recv, m_context.newTensor<float>({g * bucket.chunkSum},
                                                            MemoryCategory::kWorkspace));
    MOEWB_RETURN_IF_ERROR(bucket.group->allGatherDevice(send.data(), bucket.chunkSum, recv.data(),
                                                        CommDataType::kFloat32, stream));
  }
  offset = 0;
  for (size_t j = 0; j < bucket.params.size(); ++j) {
    CudaParameter& p = m_full.all()[bucket.params[j]];
    MOEWB_RETURN_IF_ERROR(copyChunks(stream, p.master.data(), p.master.numel(), bucket.chunk[j], g,
                                     recv.data(), bucket.chunkSum, offset, /*toBuffer=*/false));
    MOEWB_RETURN_IF_ERROR(
        castFloatToBf16(stream, p.master.data(), p.compute.data(), p.master.numel()));
    offset += bucket.chunk[j];
  }
  return Status::ok();
}

Status CudaFsdpShards::reduceBucket(Bucket& bucket) {
  cudaStream_t stream = m_context.stream();
  const int64_t g = bucket.group->worldSize();
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> send, m_context.newTensor<float>(
                                                       {g * bucket.chunkSum},
                                                       MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(fillFloat(stream, send.data(), 0.0f, send.numel()));
  int64_t offset = 0;
  for (size_t j = 0; j < bucket.params.size(); ++j) {
    CudaParameter& p = m_full.all()[bucket.params[j]];
    MOEWB_RETURN_IF_ERROR(copyChunks(stream, p.grad.data(), p.grad.numel(), bucket.chunk[j], g,
                                     send.data(), bucket.chunkSum, offset, /*toBuffer=*/true));
    offset += bucket.chunk[j];
  }
  DeviceTensor<float> recv;  // [chunkSum]
  if (g == 1) {
    recv = std::move(send);
  } else {
    MOEWB_ASSIGN_OR_RETURN(recv, m_context.newTensor<float>({bucket.chunkSum},
                                                            MemoryCategory::kWorkspace));
    MOEWB_RETURN_IF_ERROR(bucket.group->reduceScatterDevice(send.data(), recv.data(),
                                                            bucket.chunkSum,
                                                            CommDataType::kFloat32, stream));
  }
  Communicator* replicate = m_groups.denseReplicate;
  if (bucket.dense && replicate != nullptr && replicate->worldSize() > 1) {
    MOEWB_RETURN_IF_ERROR(replicate->allReduceDevice(recv.data(), bucket.chunkSum,
                                                     CommDataType::kFloat32, ReduceOp::kSum,
                                                     stream));
  }
  const float scale = 1.0f / float(m_groups.worldSize);
  offset = 0;
  for (size_t j = 0; j < bucket.params.size(); ++j) {
    CudaParameter& shard = shardOf(bucket, j);
    MOEWB_RETURN_IF_ERROR(fillFloat(stream, shard.grad.data(), 0.0f, shard.grad.numel()));
    MOEWB_RETURN_IF_ERROR(
        accumulateFloat(stream, recv.data() + offset, scale, shard.grad.data(), shard.grad.numel()));
    offset += bucket.chunk[j];
  }
  return Status::ok();
}

int64_t CudaFsdpShards::shardBytes() const {
  int64_t bytes = 0;
  for (const CudaParameters* set : {&m_dense, &m_expert}) {
    for (const CudaParameter& s : set->all()) bytes += s.master.bytes() + s.grad.bytes();
  }
  return bytes;
}

int64_t CudaFsdpShards::optimizerBytes() const {
  int64_t bytes = 0;
  for (const CudaParameters* set : {&m_dense, &m_expert}) {
    for (const CudaParameter& s : set->all()) bytes += s.adamM.bytes() + s.adamV.bytes();
  }
  return bytes;
}

}  // namespace moewb::engine::cuda
