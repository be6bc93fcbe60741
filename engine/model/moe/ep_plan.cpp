// The EP round-trip plan: splits, local offsets and the local sort per chunk (see ep_plan.h).
#include "model/moe/ep_plan.h"

#include <string>

namespace moewb::engine {
namespace {

// kInvalidArgument unless `experts` splits evenly over `ranks` and 1 <= chunks <= El.
Status checkShape(int64_t experts, int64_t ranks, int32_t chunks) {
  if (ranks < 1 || experts < 1 || experts % ranks != 0) {
    return invalidArgument("EP dispatch: " + std::to_string(experts) + " experts over " +
                           std::to_string(ranks) +
                           " EP ranks; accepted: a positive multiple of the EP ranks");
  }
  const int64_t local = experts / ranks;
  if (chunks < 1 || chunks > local) {
    return invalidArgument("EP dispatch: " + std::to_string(chunks) +
                           " all-to-all chunks; accepted: 1.." + std::to_string(local) +
                           " (the local experts)");
  }
  return Status::ok();
}

Status checkOffsets(std::span<const int32_t> offsets) {
  if (offsets.empty() || offsets[0] != 0) {
    return invalidArgument("EP dispatch: the dispatch offsets must start at row 0");
  }
  for (size_t e = 1; e < offsets.size(); ++e) {
    if (offsets[e] < offsets[e - 1]) {
      return invalidArgument("EP dispatch: dispatch offset " + std::to_string(e) + " (" +
                             std::to_string(offsets[e]) + ") is below offset " +
                             std::to_string(e - 1) + " (" + std::to_string(offsets[e - 1]) +
                             "); accepted: non-decreasing offsets");
    }
  }
  return Status::ok();
}

Status checkRecvCounts(std::span<const int64_t> recvCounts, size_t experts) {
  if (recvCounts.size() != experts) {
    return invalidArgument("EP dispatch: " + std::to_string(recvCounts.size()) +
                           " received counts; accepted: one per expert (" +
                           std::to_string(experts) + ")");
  }
  for (size_t i = 0; i < recvCounts.size(); ++i) {
    if (recvCounts[i] < 0) {
      return invalidArgument("EP dispatch: received count " + std::to_string(i) + " is " +
                             std::to_string(recvCounts[i]) + "; accepted: >= 0");
    }
  }
  return Status::ok();
}

// The chunk of local experts [first, end): splits on both sides, local offsets and the gather
// index that sorts the received [source][local expert] blocks into [local expert][source].
EpChunkPlan planChunk(std::span<const int32_t> offsets, const std::vector<int64_t>& recvCounts,
                      int64_t ranks, int64_t local, int64_t first, int64_t end) {
  EpChunkPlan chunk;
  chunk.firstExpert = first;
  chunk.endExpert = end;
  chunk.sendFirstRow.assign(size_t(ranks), 0);
  chunk.sendRows.assign(size_t(ranks), 0);
  chunk.recvFirstRow.assign(size_t(ranks), 0);
  chunk.recvRows.assign(size_t(ranks), 0);
  chunk.localOffsets.assign(size_t(local + 1), 0);
  for (size_t j = 0; j < size_t(ranks); ++j) {
    const size_t block = j * size_t(local);  // rank j's first expert, global id
    chunk.sendFirstRow[j] = offsets[block + size_t(first)];
    chunk.sendRows[j] = offsets[block + size_t(end)] - offsets[block + size_t(first)];
    for (int64_t e = first; e < end; ++e) {
      chunk.recvRows[j] += recvCounts[block + size_t(e)];
      chunk.localOffsets[size_t(e + 1)] += int32_t(recvCounts[block + size_t(e)]);
    }
    if (j > 0) chunk.recvFirstRow[j] = chunk.recvFirstRow[j - 1] + chunk.recvRows[j - 1];
  }
  for (int64_t e = 0; e < local; ++e) {
    chunk.localOffsets[size_t(e + 1)] += chunk.localOffsets[size_t(e)];
  }
  chunk.localRows = chunk.localOffsets.back();
  chunk.sortIndex.assign(size_t(chunk.localRows), 0);
  std::vector<int64_t> next(chunk.localOffsets.begin(), chunk.localOffsets.end() - 1);  // [El]
  int64_t received = 0;
  for (int64_t s = 0; s < ranks; ++s) {
    for (int64_t e = first; e < end; ++e) {
      for (int64_t i = 0; i < recvCounts[size_t(s * local + e)]; ++i) {
        chunk.sortIndex[size_t(next[size_t(e)]++)] = int32_t(received++);
      }
    }
  }
  return chunk;
}

}  // namespace

std::vector<int64_t> epSendCounts(std::span<const int32_t> offsets) {
  std::vector<int64_t> counts(offsets.empty() ? 0 : offsets.size() - 1);
  for (size_t e = 0; e < counts.size(); ++e) counts[e] = int64_t(offsets[e + 1]) - offsets[e];
  return counts;
}

Result<EpPlan> buildEpPlan(std::span<const int32_t> offsets, std::span<const int64_t> recvCounts,
                           int64_t ranks, int32_t chunks) {
  const int64_t experts = int64_t(offsets.size()) - 1;
  MOEWB_RETURN_IF_ERROR(checkShape(experts, ranks, chunks));
  MOEWB_RETURN_IF_ERROR(checkOffsets(offsets));
  MOEWB_RETURN_IF_ERROR(checkRecvCounts(recvCounts, size_t(experts)));
  EpPlan plan;
  plan.ranks = ranks;
  plan.localExperts = experts / ranks;
  plan.sendCounts = epSendCounts(offsets);
  plan.recvCounts.assign(recvCounts.begin(), recvCounts.end());
  plan.chunks.reserve(size_t(chunks));
  for (int64_t c = 0; c < chunks; ++c) {
    plan.chunks.push_back(planChunk(offsets, plan.recvCounts, ranks, plan.localExperts,
                                    c * plan.localExperts / chunks,
                                    (c + 1) * plan.localExperts / chunks));
  }
  return plan;
}

Result<EpPlan> exchangeEpPlan(Communicator& comm, std::span<const int32_t> offsets,
                              int32_t chunks) {
  const int64_t experts = int64_t(offsets.size()) - 1;
  MOEWB_RETURN_IF_ERROR(checkShape(experts, comm.worldSize(), chunks));
  MOEWB_RETURN_IF_ERROR(checkOffsets(offsets));
  // [dest rank][local expert] rows this rank sends -> [source rank][local expert] it receives.
  const std::vector<int64_t> sendCounts = epSendCounts(offsets);
  std::vector<int64_t> recvCounts(sendCounts.size(), 0);
  MOEWB_RETURN_IF_ERROR(comm.allToAll(std::span<const int64_t>(sendCounts),
                                      std::span<int64_t>(recvCounts)));
  return buildEpPlan(offsets, recvCounts, comm.worldSize(), chunks);
}

}  // namespace moewb::engine
