// FSDP shards: chunking, all-gather of values and reduce-scatter of gradients per unit (see
// fsdp_shards.h).
#include "model/parallel/fsdp_shards.h"

#include <algorithm>

#include "model/parallel/collective_error.h"

namespace moewb::engine {

FsdpShards::FsdpShards(Model<float>& model, const FsdpGroups& groups)
    : m_model(model), m_groups(groups) {
  auto& params = model.parameters();
  m_buckets.resize(size_t(model.dims().numLayers) + 1);
  for (size_t i = 0; i < params.size(); ++i) {
    Parameter<float>& p = params[i];
    if (!p.trainable) continue;
    const bool dense = !model.isExpertSharded(i);
    Communicator* group = dense ? groups.denseShard : groups.expertShard;
    const int64_t g = group->worldSize(), chunk = fsdpChunkElements(p.value.numel(), g);
    const int64_t first = group->rank() * chunk;
    Parameter<float> shard;
    shard.name = p.name;
    shard.value = Tensor<float>({chunk});
    shard.grad = Tensor<float>({chunk});
    shard.adamM = Tensor<float>({chunk});
    shard.adamV = Tensor<float>({chunk});
    shard.decay = p.decay;
    const int64_t end = std::min(first + chunk, p.value.numel());
    if (end > first) std::copy(p.value.data() + first, p.value.data() + end, shard.value.data());
    p.adamM = Tensor<float>();
    p.adamV = Tensor<float>();
    m_shards.push_back(std::move(shard));
    addToBucket(model.unitOf(i), dense, i, m_shards.size() - 1);
  }
}

void FsdpShards::addToBucket(int32_t unit, bool dense, size_t param, size_t shard) {
  std::vector<Bucket>& buckets = m_buckets[size_t(unit + 1)];
  if (buckets.empty()) {
    buckets.resize(2);
    buckets[0].group = m_groups.denseShard;
    buckets[1].group = m_groups.expertShard;
    buckets[1].dense = false;
  }
  Bucket& bucket = buckets[dense ? 0 : 1];
  const int64_t chunk = m_shards[shard].value.numel();
  bucket.params.push_back(param);
  bucket.shards.push_back(shard);
  bucket.chunk.push_back(chunk);
  bucket.chunkSum += chunk;
}

void FsdpShards::gather(int32_t unit) {
  auto& params = m_model.parameters();
  for (Bucket& bucket : m_buckets[size_t(unit + 1)]) {
    if (bucket.params.empty()) continue;
    const int64_t g = bucket.group->worldSize();
    std::vector<float> send(size_t(bucket.chunkSum));  // this rank's chunks, concatenated
    int64_t offset = 0;
    for (size_t j = 0; j < bucket.params.size(); ++j) {
      const Tensor<float>& v = m_shards[bucket.shards[j]].value;
      std::copy_n(v.data(), v.numel(), send.data() + offset);
      offset += v.numel();
    }
    std::vector<float> recv(size_t(g * bucket.chunkSum));  // [G blocks of chunkSum]
    if (g == 1) {
      recv = send;
    } else {
      throwIfFailed(bucket.group->allGather(std::span<const float>(send), std::span<float>(recv)));
    }
    for (int64_t r = 0; r < g; ++r) {
      offset = r * bucket.chunkSum;
      for (size_t j = 0; j < bucket.params.size(); ++j) {
        Tensor<float>& value = params[bucket.params[j]].value;
        const int64_t chunk = bucket.chunk[j], first = r * chunk;
        const int64_t end = std::min(first + chunk, value.numel());
        if (end > first) std::copy_n(recv.data() + offset, end - first, value.data() + first);
        offset += chunk;
      }
    }
  }
}

void FsdpShards::reduce(int32_t unit) {
  auto& params = m_model.parameters();
  const float scale = 1.0f / float(m_groups.worldSize);
  for (Bucket& bucket : m_buckets[size_t(unit + 1)]) {
    if (bucket.params.empty()) continue;
    const int64_t g = bucket.group->worldSize();
    std::vector<float> send(size_t(g * bucket.chunkSum), 0.0f);  // [G blocks of chunkSum]
    for (int64_t r = 0; r < g; ++r) {
      int64_t offset = r * bucket.chunkSum;
      for (size_t j = 0; j < bucket.params.size(); ++j) {
        const Tensor<float>& grad = params[bucket.params[j]].grad;
        const int64_t chunk = bucket.chunk[j], first = r * chunk;
        const int64_t end = std::min(first + chunk, grad.numel());
        if (end > first) std::copy(grad.data() + first, grad.data() + end, send.data() + offset);
        offset += chunk;
      }
    }
    std::vector<float> recv(size_t(bucket.chunkSum));
    if (g == 1) {
      recv = send;
    } else {
      throwIfFailed(
          bucket.group->reduceScatter(std::span<const float>(send), std::span<float>(recv)));
    }
    Communicator* replicate = m_groups.denseReplicate;
    if (bucket.dense && replicate != nullptr && replicate->worldSize() > 1) {
      throwIfFailed(replicate->allReduce(std::span<float>(recv)));
    }
    int64_t offset = 0;
    for (size_t j = 0; j < bucket.shards.size(); ++j) {
      Tensor<float>& grad = m_shards[bucket.shards[j]].grad;
      for (int64_t k = 0; k < grad.numel(); ++k) grad[k] = recv[size_t(offset + k)] * scale;
      offset += grad.numel();
    }
  }
}

double FsdpShards::localGradSquares() const {
  const bool firstReplica =
      m_groups.denseReplicate == nullptr || m_groups.denseReplicate->rank() == 0;
  const auto& params = m_model.parameters();
  double sum = 0;
  size_t shard = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].trainable) continue;
    const Tensor<float>& grad = m_shards[shard++].grad;
    if (!m_model.isExpertSharded(i) && !firstReplica) continue;
    for (int64_t k = 0; k < grad.numel(); ++k) sum += double(grad[k]) * double(grad[k]);
  }
  return sum;
}

int64_t FsdpShards::valueBytes() const {
  int64_t bytes = 0;
  for (const auto& s : m_shards) bytes += s.value.bytes();
  return bytes;
}

int64_t FsdpShards::gradBytes() const {
  int64_t bytes = 0;
  for (const auto& s : m_shards) bytes += s.grad.bytes();
  return bytes;
}

int64_t FsdpShards::optimizerBytes() const {
  int64_t bytes = 0;
  for (const auto& s : m_shards) bytes += s.adamM.bytes() + s.adamV.bytes();
  return bytes;
}

}  // namespace moewb::engine
