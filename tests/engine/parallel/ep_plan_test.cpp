// The EP dispatcher's plan alone (model/moe/ep_plan.h): splits, local offsets and the local sort
// against hand-built expectations on awkward counts (a rank that sends nothing to a peer, a local
// expert, and with it a whole chunk, that receives nothing, uneven chunks), the count exchange on
// in-process ranks (what rank s sends to rank j is what j plans to receive from s), and the
// messages of bad arguments.
#include "model/moe/ep_plan.h"

#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "comm/in_process_comm.h"

namespace moewb::engine {
namespace {

using Rows = std::vector<int64_t>;
using Ints = std::vector<int32_t>;

// Rank 0 of EP = 2 with El = 3 local experts (E = 6). It routes 0 / 1 / 2 rows to its own
// experts 0 / 1 / 2 and nothing to rank 1; rank 1 routes 0 / 2 / 1 rows to rank 0's experts.
// So local expert 0 receives nothing at all.
const Ints kOffsets = {0, 0, 1, 3, 3, 3, 3};
const Rows kRecvCounts = {0, 1, 2, 0, 2, 1};  // [source][local expert]

// Received rows in order: s0e1 -> 0, s0e2 -> 1 2, s1e1 -> 3 4, s1e2 -> 5. Expert-major local
// order: e1 reads 0 3 4, e2 reads 1 2 5.
void expectChunk(const EpChunkPlan& got, int64_t first, int64_t end, const Rows& sendFirstRow,
                 const Rows& sendRows, const Rows& recvFirstRow, const Rows& recvRows,
                 const Ints& localOffsets, const Ints& sortIndex) {
  SCOPED_TRACE("chunk [" + std::to_string(first) + ", " + std::to_string(end) + ")");
  EXPECT_EQ(got.firstExpert, first);
  EXPECT_EQ(got.endExpert, end);
  EXPECT_EQ(got.sendFirstRow, sendFirstRow);
  EXPECT_EQ(got.sendRows, sendRows);
  EXPECT_EQ(got.recvFirstRow, recvFirstRow);
  EXPECT_EQ(got.recvRows, recvRows);
  EXPECT_EQ(got.localOffsets, localOffsets);
  EXPECT_EQ(got.sortIndex, sortIndex);
  EXPECT_EQ(got.localRows, int64_t(sortIndex.size()));
}

Result<EpPlan> planOf(int32_t chunks) { return buildEpPlan(kOffsets, kRecvCounts, 2, chunks); }

TEST(EpPlan, OneChunkSortsSourceMajorRowsExpertMajor) {
  const Result<EpPlan> plan = planOf(1);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  EXPECT_EQ(plan->ranks, 2);
  EXPECT_EQ(plan->localExperts, 3);
  EXPECT_EQ(plan->sendCounts, (Rows{0, 1, 2, 0, 0, 0}));
  EXPECT_EQ(plan->recvCounts, kRecvCounts);
  ASSERT_EQ(plan->chunks.size(), 1u);
  expectChunk(plan->chunks[0], 0, 3, {0, 3}, {3, 0}, {0, 3}, {3, 3}, {0, 0, 3, 6},
              {0, 3, 4, 1, 2, 5});
}

TEST(EpPlan, TwoChunksWithAnEmptyChunk) {
  const Result<EpPlan> plan = planOf(2);  // experts [0, 1) and [1, 3)
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  ASSERT_EQ(plan->chunks.size(), 2u);
  expectChunk(plan->chunks[0], 0, 1, {0, 3}, {0, 0}, {0, 0}, {0, 0}, {0, 0, 0, 0}, {});
  expectChunk(plan->chunks[1], 1, 3, {0, 3}, {3, 0}, {0, 3}, {3, 3}, {0, 0, 3, 6},
              {0, 3, 4, 1, 2, 5});
}

TEST(EpPlan, OneChunkPerExpert) {
  const Result<EpPlan> plan = planOf(3);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  ASSERT_EQ(plan->chunks.size(), 3u);
  expectChunk(plan->chunks[0], 0, 1, {0, 3}, {0, 0}, {0, 0}, {0, 0}, {0, 0, 0, 0}, {});
  // Expert 1: s0 sends 1 row, s1 2 rows; expert 2: s0 2 rows (after rank 0's expert-1 row), s1 1.
  expectChunk(plan->chunks[1], 1, 2, {0, 3}, {1, 0}, {0, 1}, {1, 2}, {0, 0, 3, 3}, {0, 1, 2});
  expectChunk(plan->chunks[2], 2, 3, {1, 3}, {2, 0}, {0, 2}, {2, 1}, {0, 0, 0, 3}, {0, 1, 2});
}

TEST(EpPlan, RejectsBadArgumentsNamingThem) {
  const auto message = [](const Result<EpPlan>& r) {
    EXPECT_FALSE(r.isOk());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    return r.status().toString();
  };
  EXPECT_NE(message(buildEpPlan(Ints{0, 1, 2, 3, 4, 5}, Rows(5, 0), 2, 1)).find("5 experts"),
            std::string::npos);
  EXPECT_NE(message(planOf(0)).find("accepted: 1..3"), std::string::npos);
  EXPECT_NE(message(planOf(4)).find("4 all-to-all chunks"), std::string::npos);
  EXPECT_NE(message(buildEpPlan(Ints{0, 2, 1, 3}, Rows(3, 0), 1, 1)).find("offset 2 (1)"),
            std::string::npos);
  EXPECT_NE(message(buildEpPlan(Ints{1, 2}, Rows(1, 0), 1, 1)).find("row 0"), std::string::npos);
  EXPECT_NE(message(buildEpPlan(kOffsets, Rows(5, 0), 2, 1)).find("5 received counts"),
            std::string::npos);
  EXPECT_NE(message(buildEpPlan(kOffsets, Rows{0, 1, -2, 0, 0, 0}, 2, 1)).find("is -2"),
            std::string::npos);
}

// Rows rank r routes to global expert e: rank 1 routes nothing, some experts get nothing.
int32_t rowsFor(int32_t rank, int64_t expert) {
  if (rank == 1) return 0;
  return (rank + expert) % 3 == 0 ? 0 : int32_t(1 + (rank * 5 + expert * 3) % 4);
}

TEST(EpPlan, CountExchangeMatchesThePeersSends) {
  constexpr int32_t kRanks = 3, kLocal = 2, kChunks = 2;
  std::vector<EpPlan> plans(kRanks);
  std::mutex mutex;
  const Status status = runRanks(kRanks, [&](Communicator& comm) -> Status {
    Ints offsets(kRanks * kLocal + 1, 0);
    for (int64_t e = 0; e < kRanks * kLocal; ++e) {
      offsets[size_t(e + 1)] = offsets[size_t(e)] + rowsFor(comm.rank(), e);
    }
    MOEWB_ASSIGN_OR_RETURN(EpPlan plan, exchangeEpPlan(comm, offsets, kChunks));
    std::lock_guard<std::mutex> lock(mutex);
    plans[size_t(comm.rank())] = std::move(plan);
    return Status::ok();
  });
  ASSERT_TRUE(status.isOk()) << status.toString();
  for (int32_t s = 0; s < kRanks; ++s) {
    for (int32_t j = 0; j < kRanks; ++j) {
      for (int32_t e = 0; e < kLocal; ++e) {
        EXPECT_EQ(plans[size_t(j)].recvCounts[size_t(s * kLocal + e)], rowsFor(s, j * kLocal + e))
            << "rank " << j << " from " << s << " expert " << e;
      }
      for (size_t c = 0; c < kChunks; ++c) {
        EXPECT_EQ(plans[size_t(s)].chunks[c].sendRows[size_t(j)],
                  plans[size_t(j)].chunks[c].recvRows[size_t(s)])
            << "chunk " << c << " from " << s << " to " << j;
      }
    }
  }
}

TEST(EpPlan, CountExchangeRejectsExpertsThatDoNotSplitBeforeAnyPeerWaits) {
  const Status status = runRanks(2, [](Communicator& comm) -> Status {
    return exchangeEpPlan(comm, Ints{0, 1, 2, 3}, 1).status();  // 3 experts over 2 ranks
  });
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.toString();
  EXPECT_NE(status.toString().find("3 experts over 2 EP ranks"), std::string::npos);
}

}  // namespace
}  // namespace moewb::engine
