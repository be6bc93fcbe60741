// Groups, collective observer and sums shared by the rank steppers (see rank_common.h).
#include "train/parallel/rank_common.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "model/cpu/model.h"
#include "model/parallel/collective_error.h"

namespace moewb::engine {

Result<ParallelGroups> splitParallelGroups(Communicator& world, const ParallelSection& parallel) {
  // Colours: the ranks of a group share the other index of their place, so each rank's group rank
  // (ordered by world rank) is its place's index in that group.
  const int32_t r = world.rank();
  const ParallelPlace place = placeOf(parallel, r);
  ParallelGroups groups;
  MOEWB_ASSIGN_OR_RETURN(groups.ep, world.split(place.expertDpRank, r));
  MOEWB_ASSIGN_OR_RETURN(groups.expertDp, world.split(place.expertShard, r));
  MOEWB_ASSIGN_OR_RETURN(groups.fsdp, world.split(place.replica, r));
  MOEWB_ASSIGN_OR_RETURN(groups.replicate, world.split(place.fsdpRank, r));
  return groups;
}

void observeCollectives(Communicator& comm, const char* group, EventSink* sink, int32_t worldRank,
                        const CommTag* tag, const int64_t* step) {
  if (sink == nullptr) return;
  comm.setObserver([=](const CollectiveRecord& record) {
    CollectiveEvent event;
    event.step = *step;
    event.layer = tag->layer;
    event.rank = worldRank;
    event.op = record.op;
    event.group = group;
    event.phase = tag->phase;
    event.seq = record.seq;
    event.bytesSent = record.bytesSent;
    event.bytesReceived = record.bytesReceived;
    event.peers = record.peers;
    event.startNs = record.startNs;
    event.endNs = record.endNs;
    event.ok = record.ok;
    sink->onCollective(event);
    if (record.op != "all_to_all_v" || event.phase.empty() || !record.ok) return;
    A2aTrafficEvent traffic;
    traffic.step = *step;
    traffic.layer = tag->layer;
    traffic.srcRank = worldRank;
    traffic.dstRanks = record.peers;
    traffic.bytes = record.sendBytesByPeer;
    traffic.phase = event.phase;
    sink->onA2aTraffic(traffic);
  });
}

double sumOverRanks(Communicator& world, double value) {
  return sumsOverRanks(world, std::span<const double>(&value, 1))[0];
}

std::vector<double> sumsOverRanks(Communicator& world, std::span<const double> values) {
  const size_t m = values.size();
  std::vector<float> send(2 * m);  // each value as hi + lo floats
  for (size_t i = 0; i < m; ++i) {
    const float hi = float(values[i]);
    send[2 * i] = hi;
    send[2 * i + 1] = std::isfinite(hi) ? float(values[i] - double(hi)) : 0.0f;
  }
  std::vector<float> recv(2 * m * size_t(world.worldSize()));
  throwIfFailed(world.allGather(std::span<const float>(send), std::span<float>(recv)));
  std::vector<double> sums(m, 0.0);
  for (size_t r = 0; r < size_t(world.worldSize()); ++r) {
    for (size_t i = 0; i < m; ++i) {
      sums[i] += double(recv[r * 2 * m + 2 * i]) + double(recv[r * 2 * m + 2 * i + 1]);
    }
  }
  return sums;
}

Result<GlobalLosses> meanLossesOverRanks(Communicator& world, double loss, double auxLoss,
                                         int64_t stepIndex) {
  const double local[2] = {loss, auxLoss};
  const std::vector<double> sums = sumsOverRanks(world, local);
  const double w = double(world.worldSize());
  const GlobalLosses global{sums[0] / w, sums[1] / w};
  if (!std::isfinite(global.loss) || !std::isfinite(global.auxLoss)) {
    return divergedLoss(stepIndex, global.loss, global.auxLoss);
  }
  return global;
}

Status sumExpertCountsOverRanks(Communicator& world, std::vector<ExpertBias>& biases) {
  std::vector<int64_t> all;
  for (const ExpertBias& bias : biases) {
    all.insert(all.end(), bias.pendingCounts.begin(), bias.pendingCounts.end());
  }
  if (all.empty()) return Status::ok();
  MOEWB_RETURN_IF_ERROR(world.allReduce(std::span<int64_t>(all)));
  size_t offset = 0;
  for (ExpertBias& bias : biases) {
    std::copy_n(all.begin() + std::ptrdiff_t(offset), bias.pendingCounts.size(),
                bias.pendingCounts.begin());
    offset += bias.pendingCounts.size();
  }
  return Status::ok();
}

Result<bool> agreeOnStop(Communicator& world, bool stop) {
  std::vector<int64_t> flag{stop ? 1 : 0};
  MOEWB_RETURN_IF_ERROR(world.allReduce(std::span<int64_t>(flag), ReduceOp::kMax));
  return flag[0] != 0;
}

void emitExpertLoads(EventSink& sink, int64_t step, int32_t rank, const ForwardResult& forward) {
  for (size_t layer = 0; layer < forward.expertCounts.size(); ++layer) {
    ExpertLoadEvent load;
    load.step = step;
    load.layer = int32_t(layer);
    load.rank = rank;
    load.tokensPerExpert = forward.expertCounts[layer];
    load.droppedPerExpert = forward.expertDropped[layer];
    load.droppedPerExpert.resize(load.tokensPerExpert.size(), 0);
    load.biasPerExpert = forward.expertBias[layer];
    sink.onExpertLoad(load);
  }
}

}  // namespace moewb::engine
