// Gather and scatter of a rank group's training state (see shard_state.h).
#include "train/parallel/shard_state.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "model/cpu/parameter_layout.h"
#include "model/parallel/fsdp_shards.h"

namespace moewb::engine {
namespace {

using Field = Tensor<float> Parameter<float>::*;
constexpr Field kFields[] = {&Parameter<float>::value, &Parameter<float>::grad,
                             &Parameter<float>::adamM, &Parameter<float>::adamV};

// The one-rank parameter `decl` with every field zero (untouched pages); kFailedPrecondition for
// a frozen one: a rank group's state holds trainable parameters only.
Result<Parameter<float>> zeroFullParameter(const ParameterDecl& decl) {
  if (!decl.trainable) {
    return failedPrecondition(decl.name + " is frozen (lora.enabled): the state of a rank "
                              "group holds trainable parameters only");
  }
  Parameter<float> p;
  p.name = decl.name;
  p.decay = decl.decay;
  for (Field field : kFields) p.*field = Tensor<float>(decl.shape, LazyZeroPages{});
  return p;
}

// The parameter layouts of the one-rank model and of one EP shard of `config`'s model.
// local[i].expertSharded says how parameter i is placed: over the expert-data-parallel group
// when parallel.ep > 1, else (ep = 1: every rank holds every expert) like a dense parameter.
struct Layouts {
  std::vector<ParameterDecl> full;   // [params] full shapes
  std::vector<ParameterDecl> local;  // [params] shapes on an EP rank (E / ep experts)
};

Layouts layoutsOf(const RunConfig& config) {
  ModelDims dims = ModelDims::fromConfig(config);
  Layouts layouts;
  layouts.full = modelParameterLayout(dims);
  dims.expertShards = config.parallel.ep;
  layouts.local = modelParameterLayout(dims);
  return layouts;
}

// One chunk of a parameter on one rank: the rank, the chunk's first element in the full flat
// tensor, the chunk's first element in its slice and the slice's size.
struct ChunkSource {
  int32_t rank = 0;
  int64_t fullOffset = 0;  // first element of the chunk's slice in the full tensor
  int64_t first = 0;       // first element of the chunk within the slice
  int64_t count = 0;       // elements of the chunk that are not padding
};

// Where the chunks of parameter `decl` (its slice of `sliceNumel` elements per EP shard for
// experts; the whole tensor for dense ones) lie over the ranks of `parallel`, in rank order.
std::vector<ChunkSource> chunkSources(const ParallelSection& parallel, const ParameterDecl& decl,
                                      int64_t sliceNumel) {
  std::vector<ChunkSource> sources;
  for (int32_t r = 0; r < parallel.worldSize; ++r) {
    const ParallelPlace place = placeOf(parallel, r);
    const bool expert = decl.expertSharded;
    const int32_t groupRank = expert ? place.expertDpRank : place.fsdpRank;
    const int64_t chunk = fsdpChunkElements(sliceNumel, expert ? place.expertDpSize
                                                                : place.fsdpSize);
    ChunkSource source;
    source.rank = r;
    source.fullOffset = expert ? place.expertShard * sliceNumel : 0;
    source.first = std::min(groupRank * chunk, sliceNumel);
    source.count = std::min(source.first + chunk, sliceNumel) - source.first;
    sources.push_back(source);
  }
  return sources;
}

// The chunk size of parameter `decl` on rank `rank`.
int64_t chunkOf(const ParallelSection& parallel, const ParameterDecl& decl, int64_t sliceNumel,
                int32_t rank) {
  const ParallelPlace place = placeOf(parallel, rank);
  return fsdpChunkElements(sliceNumel, decl.expertSharded ? place.expertDpSize : place.fsdpSize);
}

bool sameBits(const Tensor<float>& a, const Tensor<float>& b) {
  return a.numel() == b.numel() &&
         (a.numel() == 0 || std::memcmp(a.data(), b.data(), size_t(a.bytes())) == 0);
}

Status checkRanksAgree(const std::vector<RankShards>& ranks) {
  for (size_t r = 1; r < ranks.size(); ++r) {
    if (ranks[r].stepsDone != ranks[0].stepsDone) {
      return internalError("rank " + std::to_string(r) + " has done " +
                           std::to_string(ranks[r].stepsDone) + " steps but rank 0 " +
                           std::to_string(ranks[0].stepsDone));
    }
    const auto& a = ranks[r].expertBiases;
    const auto& b = ranks[0].expertBiases;
    bool same = a.size() == b.size();
    for (size_t l = 0; same && l < a.size(); ++l) {
      same = a[l].bias == b[l].bias && a[l].pendingCounts == b[l].pendingCounts;
    }
    if (!same) return internalError("rank " + std::to_string(r) + "'s expert biases differ from "
                                    "rank 0's");
  }
  return Status::ok();
}

// Copies `count` elements of every field from `src` at `srcOffset` to `dst` at `dstOffset`.
void copyFields(const Parameter<float>& src, int64_t srcOffset, Parameter<float>& dst,
                int64_t dstOffset, int64_t count) {
  if (count <= 0) return;
  for (Field field : kFields) {
    std::copy_n((src.*field).data() + srcOffset, count, (dst.*field).data() + dstOffset);
  }
}

}  // namespace

ParallelPlace placeOf(const ParallelSection& parallel, int32_t rank) {
  ParallelPlace place;
  const int32_t ep = parallel.ep, fsdp = parallel.fsdpDegree();
  place.expertShard = rank % ep;
  place.expertDpRank = rank / ep;
  place.expertDpSize = parallel.worldSize / ep;
  place.fsdpRank = rank % fsdp;
  place.fsdpSize = fsdp;
  place.replica = rank / fsdp;
  return place;
}

Result<TrainingState> assembleTrainingState(const RunConfig& config,
                                            const std::vector<RankShards>& ranks) {
  const ParallelSection& parallel = config.parallel;
  if (int32_t(ranks.size()) != parallel.worldSize) {
    return internalError("the re-shard got the state of " + std::to_string(ranks.size()) +
                         " ranks for parallel.world_size = " + std::to_string(parallel.worldSize));
  }
  MOEWB_RETURN_IF_ERROR(checkRanksAgree(ranks));
  const Layouts layouts = layoutsOf(config);
  TrainingState state;
  state.stepsDone = ranks[0].stepsDone;
  state.expertBiases = ranks[0].expertBiases;
  for (size_t i = 0; i < layouts.full.size(); ++i) {
    const ParameterDecl& decl = layouts.full[i];
    MOEWB_ASSIGN_OR_RETURN(Parameter<float> p, zeroFullParameter(decl));
    const ParameterDecl& local = layouts.local[i];
    const int64_t slice = local.numel();
    for (const ChunkSource& source : chunkSources(parallel, local, slice)) {
      const std::vector<Parameter<float>>& shards = ranks[size_t(source.rank)].shards;
      const int64_t chunk = chunkOf(parallel, local, slice, source.rank);
      const Parameter<float>* shard = i < shards.size() ? &shards[i] : nullptr;
      if (shard == nullptr || shard->name != decl.name || shard->value.numel() != chunk ||
          shard->grad.numel() != chunk || shard->adamM.numel() != chunk ||
          shard->adamV.numel() != chunk) {
        return internalError("rank " + std::to_string(source.rank) + "'s shard of " + decl.name +
                             " does not fit the layout (" + std::to_string(chunk) +
                             " elements expected)");
      }
      const ParallelPlace place = placeOf(parallel, source.rank);
      if (!local.expertSharded && place.replica != 0) {
        const Parameter<float>& first = ranks[size_t(place.fsdpRank)].shards[i];
        for (Field field : kFields) {
          if (!sameBits(first.*field, shard->*field)) {
            return internalError("rank " + std::to_string(source.rank) + "'s replica of " +
                                 decl.name + " differs from rank " +
                                 std::to_string(place.fsdpRank) + "'s");
          }
        }
        continue;
      }
      copyFields(*shard, 0, p, source.fullOffset + source.first, source.count);
    }
    state.params.push_back(std::move(p));
  }
  return state;
}

Result<TrainingState> emptyTrainingState(const RunConfig& config) {
  TrainingState state;
  for (const ParameterDecl& decl : layoutsOf(config).full) {
    MOEWB_ASSIGN_OR_RETURN(Parameter<float> p, zeroFullParameter(decl));
    state.params.push_back(std::move(p));
  }
  const ModelDims dims = ModelDims::fromConfig(config);  // the host model's rule for biases
  if (dims.moe.biasUpdateRate > 0) {
    state.expertBiases.assign(size_t(dims.numLayers), makeExpertBias(dims.numExperts));
  }
  return state;
}

Result<RankShards> shardsOfRank(const RunConfig& config, const TrainingState& state,
                                int32_t rank) {
  const ParallelSection& parallel = config.parallel;
  const Layouts layouts = layoutsOf(config);
  if (state.params.size() != layouts.full.size()) {
    return invalidArgument("the state has " + std::to_string(state.params.size()) +
                           " parameters but the model of this config has " +
                           std::to_string(layouts.full.size()));
  }
  if (!state.expertBiases.empty() &&
      state.expertBiases.size() != size_t(config.model.numLayers)) {
    return invalidArgument("the state has expert biases of " +
                           std::to_string(state.expertBiases.size()) +
                           " layers; model.num_layers = " +
                           std::to_string(config.model.numLayers));
  }
  RankShards out;
  out.stepsDone = state.stepsDone;
  out.expertBiases = state.expertBiases;
  for (size_t i = 0; i < layouts.full.size(); ++i) {
    const ParameterDecl& decl = layouts.full[i];
    const Parameter<float>& p = state.params[i];
    if (p.name != decl.name || p.value.shape() != decl.shape || p.grad.numel() != decl.numel() ||
        p.adamM.numel() != decl.numel() || p.adamV.numel() != decl.numel()) {
      return invalidArgument("the state's parameter " + std::to_string(i) + " (" + p.name +
                             ") is not " + decl.name + " of this config's model, or has "
                             "another shape or no moments");
    }
    const ParameterDecl& local = layouts.local[i];
    const int64_t slice = local.numel();
    const int64_t chunk = chunkOf(parallel, local, slice, rank);
    Parameter<float> shard;
    shard.name = decl.name;
    shard.decay = decl.decay;
    for (Field field : kFields) shard.*field = Tensor<float>({chunk});
    for (const ChunkSource& source : chunkSources(parallel, local, slice)) {
      if (source.rank != rank) continue;
      copyFields(p, source.fullOffset + source.first, shard, 0, source.count);
    }
    out.shards.push_back(std::move(shard));
  }
  return out;
}

}  // namespace moewb::engine
