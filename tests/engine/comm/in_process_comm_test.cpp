// InProcessComm: every collective against hand-computed values for world sizes 1-4 (rank-seeded
// data, as in nccl-tests), all-to-all-v with uneven and zero counts, bitwise determinism of
// reductions, split groups, faults (missing or failing ranks, argument mismatches), sequence
// numbers and collective records.
#include "comm/in_process_comm.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace moewb::engine {
namespace {

using std::chrono::milliseconds;

constexpr float kPoison = -12345.0f;

void expectOk(const Status& s) { EXPECT_TRUE(s.isOk()) << s.toString(); }

// Rank-seeded value of element k of the block that `src` sends to `dst`.
float blockValue(int32_t src, int32_t dst, int64_t k) { return float(1000 * src + 100 * dst + k); }

TEST(InProcessComm, AllToAllEqualSplits) {
  for (int32_t n = 1; n <= 4; ++n) {
    SCOPED_TRACE("world size " + std::to_string(n));
    const int64_t c = 3;
    expectOk(runRanks(n, [&](Communicator& comm) {
      const int32_t me = comm.rank();
      std::vector<float> send(size_t(n * c)), recv(size_t(n * c), kPoison);
      std::vector<int64_t> sendI(size_t(n * c)), recvI(size_t(n * c), -1);
      for (int32_t j = 0; j < n; ++j) {
        for (int64_t k = 0; k < c; ++k) {
          send[size_t(j * c + k)] = blockValue(me, j, k);
          sendI[size_t(j * c + k)] = int64_t(blockValue(me, j, k)) + (int64_t(1) << 40);
        }
      }
      MOEWB_RETURN_IF_ERROR(comm.allToAll(send, recv));
      MOEWB_RETURN_IF_ERROR(comm.allToAll(sendI, recvI));
      for (int32_t i = 0; i < n; ++i) {
        for (int64_t k = 0; k < c; ++k) {
          EXPECT_EQ(recv[size_t(i * c + k)], blockValue(i, me, k));
          EXPECT_EQ(recvI[size_t(i * c + k)], int64_t(blockValue(i, me, k)) + (int64_t(1) << 40));
        }
      }
      return Status::ok();
    }));
  }
}

// Elements that rank i sends to rank j: uneven, zero on the diagonal for some ranks, and rank 1
// sends nothing at all.
int64_t vCount(int32_t i, int32_t j, int32_t n) {
  if (i == 1) return 0;
  return (i + 2 * j) % 3 + (j == n - 1 ? 2 : 0);
}

TEST(InProcessComm, AllToAllVUnevenAndZeroCounts) {
  for (int32_t n = 1; n <= 4; ++n) {
    SCOPED_TRACE("world size " + std::to_string(n));
    expectOk(runRanks(n, [&](Communicator& comm) {
      const int32_t me = comm.rank();
      // Send blocks in rank order with a one-element gap before each; receive blocks in reverse
      // rank order with a gap too, so displacements matter.
      std::vector<int64_t> sendCounts(static_cast<size_t>(n)), sendDispls(static_cast<size_t>(n)), recvCounts(static_cast<size_t>(n)),
          recvDispls(static_cast<size_t>(n));
      int64_t sendSize = 0;
      for (int32_t j = 0; j < n; ++j) {
        sendCounts[size_t(j)] = vCount(me, j, n);
        sendDispls[size_t(j)] = sendSize + 1;
        sendSize += 1 + sendCounts[size_t(j)];
      }
      int64_t recvSize = 0;
      for (int32_t i = n - 1; i >= 0; --i) {
        recvCounts[size_t(i)] = vCount(i, me, n);
        recvDispls[size_t(i)] = recvSize + 1;
        recvSize += 1 + recvCounts[size_t(i)];
      }
      std::vector<float> send(size_t(sendSize), kPoison), recv(size_t(recvSize), kPoison);
      std::vector<int64_t> sendI(size_t(sendSize), -1), recvI(size_t(recvSize), -1);
      for (int32_t j = 0; j < n; ++j) {
        for (int64_t k = 0; k < sendCounts[size_t(j)]; ++k) {
          send[size_t(sendDispls[size_t(j)] + k)] = blockValue(me, j, k);
          sendI[size_t(sendDispls[size_t(j)] + k)] = int64_t(blockValue(me, j, k));
        }
      }
      MOEWB_RETURN_IF_ERROR(
          comm.allToAllV(send, sendCounts, sendDispls, recv, recvCounts, recvDispls));
      MOEWB_RETURN_IF_ERROR(
          comm.allToAllV(sendI, sendCounts, sendDispls, recvI, recvCounts, recvDispls));
      std::vector<float> expected(size_t(recvSize), kPoison);
      for (int32_t i = 0; i < n; ++i) {
        for (int64_t k = 0; k < recvCounts[size_t(i)]; ++k) {
          expected[size_t(recvDispls[size_t(i)] + k)] = blockValue(i, me, k);
        }
      }
      EXPECT_EQ(recv, expected);  // gaps keep the poison
      for (size_t x = 0; x < expected.size(); ++x) {
        EXPECT_EQ(recvI[x], expected[x] == kPoison ? -1 : int64_t(expected[x]));
      }
      return Status::ok();
    }));
  }
}

TEST(InProcessComm, AllGather) {
  for (int32_t n = 1; n <= 4; ++n) {
    SCOPED_TRACE("world size " + std::to_string(n));
    const int64_t c = 2;
    expectOk(runRanks(n, [&](Communicator& comm) {
      const int32_t me = comm.rank();
      std::vector<float> send = {float(10 * me), float(10 * me + 1)};
      std::vector<int64_t> sendI = {-me, me * me};
      std::vector<float> recv(size_t(n * c), kPoison);
      std::vector<int64_t> recvI(size_t(n * c), -99);
      MOEWB_RETURN_IF_ERROR(comm.allGather(send, recv));
      MOEWB_RETURN_IF_ERROR(comm.allGather(sendI, recvI));
      for (int32_t r = 0; r < n; ++r) {
        EXPECT_EQ(recv[size_t(r * c)], float(10 * r));
        EXPECT_EQ(recv[size_t(r * c + 1)], float(10 * r + 1));
        EXPECT_EQ(recvI[size_t(r * c)], -r);
        EXPECT_EQ(recvI[size_t(r * c + 1)], r * r);
      }
      return Status::ok();
    }));
  }
}

TEST(InProcessComm, ReduceScatterSums) {
  for (int32_t n = 1; n <= 4; ++n) {
    SCOPED_TRACE("world size " + std::to_string(n));
    const int64_t c = 3;
    expectOk(runRanks(n, [&](Communicator& comm) {
      const int32_t me = comm.rank();
      std::vector<float> send(size_t(n * c)), recv(size_t(c), kPoison);
      for (int32_t b = 0; b < n; ++b) {
        for (int64_t k = 0; k < c; ++k) send[size_t(b * c + k)] = float(me + 10 * b + 100 * k);
      }
      MOEWB_RETURN_IF_ERROR(comm.reduceScatter(send, recv));
      for (int64_t k = 0; k < c; ++k) {
        // sum over r of (r + 10*me + 100*k)
        EXPECT_EQ(recv[size_t(k)], float(n * (n - 1) / 2 + n * (10 * me + 100 * k)));
      }
      return Status::ok();
    }));
  }
}

TEST(InProcessComm, AllReduceSumAndMax) {
  for (int32_t n = 1; n <= 4; ++n) {
    SCOPED_TRACE("world size " + std::to_string(n));
    expectOk(runRanks(n, [&](Communicator& comm) {
      const int32_t me = comm.rank();
      std::vector<float> sum = {float(me), float(2 * me + 1), -0.5f};
      std::vector<float> mx = {float(me), float(-me), 7.0f};
      std::vector<int64_t> sumI = {me, (int64_t(1) << 40) * me};
      std::vector<int64_t> mxI = {(me * 7) % 4, -me};
      MOEWB_RETURN_IF_ERROR(comm.allReduce(sum));
      MOEWB_RETURN_IF_ERROR(comm.allReduce(mx, ReduceOp::kMax));
      MOEWB_RETURN_IF_ERROR(comm.allReduce(sumI, ReduceOp::kSum));
      MOEWB_RETURN_IF_ERROR(comm.allReduce(mxI, ReduceOp::kMax));
      const int64_t tri = n * (n - 1) / 2;
      EXPECT_EQ(sum, (std::vector<float>{float(tri), float(2 * tri + n), -0.5f * float(n)}));
      EXPECT_EQ(mx, (std::vector<float>{float(n - 1), 0.0f, 7.0f}));
      EXPECT_EQ(sumI, (std::vector<int64_t>{tri, (int64_t(1) << 40) * tri}));
      int64_t maxMod = 0;
      for (int32_t r = 0; r < n; ++r) maxMod = std::max<int64_t>(maxMod, (r * 7) % 4);
      EXPECT_EQ(mxI, (std::vector<int64_t>{maxMod, 0}));
      return Status::ok();
    }));
  }
}

TEST(InProcessComm, BroadcastFromEveryRoot) {
  for (int32_t n = 1; n <= 4; ++n) {
    SCOPED_TRACE("world size " + std::to_string(n));
    expectOk(runRanks(n, [&](Communicator& comm) {
      const int32_t me = comm.rank();
      for (int32_t root = 0; root < n; ++root) {
        std::vector<float> buf = {float(me), float(100 + me)};
        std::vector<int64_t> bufI = {me, -me, 5};
        MOEWB_RETURN_IF_ERROR(comm.broadcast(buf, root));
        MOEWB_RETURN_IF_ERROR(comm.broadcast(bufI, root));
        EXPECT_EQ(buf, (std::vector<float>{float(root), float(100 + root)}));
        EXPECT_EQ(bufI, (std::vector<int64_t>{root, -root, 5}));
      }
      return Status::ok();
    }));
  }
}

TEST(InProcessComm, BarrierWaitsForAllRanks) {
  for (int32_t n = 1; n <= 4; ++n) {
    std::atomic<int32_t> before{0};
    expectOk(runRanks(n, [&](Communicator& comm) {
      std::this_thread::sleep_for(milliseconds(5 * comm.rank()));
      before.fetch_add(1);
      MOEWB_RETURN_IF_ERROR(comm.barrier());
      EXPECT_EQ(before.load(), n);
      return Status::ok();
    }));
  }
}

// Values of mixed magnitude, so that a different summation order would change the bits.
std::vector<float> mixedValues(int32_t rank, int64_t count) {
  std::mt19937 gen(uint32_t(1234 + rank));
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-20, 20);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& x : v) x = std::ldexp(mant(gen), exp(gen));
  return v;
}

TEST(InProcessComm, ReductionsAreBitwiseDeterministic) {
  const int32_t n = 4;
  const int64_t c = 257;
  // The rank-order sum, computed serially.
  std::vector<float> expected = mixedValues(0, n * c);
  for (int32_t r = 1; r < n; ++r) {
    const std::vector<float> v = mixedValues(r, n * c);
    for (size_t k = 0; k < expected.size(); ++k) expected[k] += v[k];
  }
  for (int rep = 0; rep < 20; ++rep) {
    SCOPED_TRACE("repetition " + std::to_string(rep));
    expectOk(runRanks(n, [&](Communicator& comm) {
      const int32_t me = comm.rank();
      // Vary the arrival order from repetition to repetition.
      std::this_thread::sleep_for(std::chrono::microseconds(((me + rep) % n) * 300));
      std::vector<float> buf = mixedValues(me, n * c);
      const std::vector<float> send = buf;
      std::vector<float> part(size_t(c), kPoison);
      MOEWB_RETURN_IF_ERROR(comm.allReduce(buf));
      MOEWB_RETURN_IF_ERROR(comm.reduceScatter(send, part));
      EXPECT_EQ(std::memcmp(buf.data(), expected.data(), buf.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(part.data(), expected.data() + me * c, part.size() * sizeof(float)), 0);
      return Status::ok();
    }));
  }
}

TEST(InProcessComm, SplitIntoIndependentGroups) {
  const int32_t n = 4;
  expectOk(runRanks(n, [&](Communicator& world) {
    const int32_t me = world.rank();
    // Blocks {0,1},{2,3} (e.g. EP groups) and the transposed {0,2},{1,3} (e.g. FSDP groups).
    MOEWB_ASSIGN_OR_RETURN(auto block, world.split(me / 2, me));
    MOEWB_ASSIGN_OR_RETURN(auto strided, world.split(me % 2, me));
    // Reversed key: new rank order is the reverse of the parent's.
    MOEWB_ASSIGN_OR_RETURN(auto reversed, world.split(0, -me));
    // Only even ranks join; odd ranks get no communicator.
    MOEWB_ASSIGN_OR_RETURN(auto evens, world.split(me % 2 == 0 ? 7 : Communicator::kNoColor, 0));
    EXPECT_EQ(block->worldSize(), 2);
    EXPECT_EQ(block->rank(), me % 2);
    EXPECT_EQ(block->globalRank(), me);
    EXPECT_EQ(block->groupGlobalRanks(), (std::vector<int32_t>{me / 2 * 2, me / 2 * 2 + 1}));
    EXPECT_EQ(strided->rank(), me / 2);
    EXPECT_EQ(strided->groupGlobalRanks(), (std::vector<int32_t>{me % 2, me % 2 + 2}));
    EXPECT_EQ(reversed->rank(), n - 1 - me);
    EXPECT_EQ(reversed->groupGlobalRanks(), (std::vector<int32_t>{3, 2, 1, 0}));
    EXPECT_EQ(evens != nullptr, me % 2 == 0);

    // Groups run different numbers of collectives without interfering.
    const int rounds = me < 2 ? 3 : 1;
    for (int i = 0; i < rounds; ++i) {
      std::vector<int64_t> v = {me};
      MOEWB_RETURN_IF_ERROR(block->allReduce(v));
      EXPECT_EQ(v[0], me < 2 ? 1 : 5);
    }
    EXPECT_EQ(block->lastSequence(), uint64_t(rounds));
    std::vector<float> gathered(2, kPoison);
    const float mine = float(me);
    MOEWB_RETURN_IF_ERROR(strided->allGather(std::span<const float>(&mine, 1), gathered));
    EXPECT_EQ(gathered, (std::vector<float>{float(me % 2), float(me % 2 + 2)}));
    std::vector<float> fromRoot = {float(me)};
    MOEWB_RETURN_IF_ERROR(reversed->broadcast(fromRoot, 0));  // new rank 0 = global rank 3
    EXPECT_EQ(fromRoot[0], 3.0f);
    if (evens) {
      std::vector<int64_t> v = {me};
      MOEWB_RETURN_IF_ERROR(evens->allReduce(v));
      EXPECT_EQ(v[0], 2);
    }
    // The split calls took sequence numbers 1-4 on the parent.
    EXPECT_EQ(world.lastSequence(), 4u);
    return world.barrier();
  }));
}

TEST(InProcessComm, MissingRankTimesOutWithItsName) {
  const int32_t n = 4;
  const auto start = std::chrono::steady_clock::now();
  const Status result = runRanks(
      n,
      [&](Communicator& comm) {
        if (comm.rank() == 3) return Status::ok();  // never arrives
        MOEWB_RETURN_IF_ERROR(comm.barrier());  // #1 would hang without rank 3
        return Status::ok();
      },
      milliseconds(200));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::seconds(5));
  ASSERT_FALSE(result.isOk());
  EXPECT_EQ(result.code(), StatusCode::kCancelled);
  EXPECT_NE(result.message().find("barrier #1"), std::string::npos) << result.message();
  EXPECT_NE(result.message().find("waiting for rank 3 of 4"), std::string::npos)
      << result.message();
  EXPECT_NE(result.message().find("200 ms"), std::string::npos) << result.message();
}

TEST(InProcessComm, TimeoutInSubGroupNamesGlobalRankAndAbortsLaterCalls) {
  InProcessWorld world(4, milliseconds(200));
  std::vector<Status> first(4), later(4);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      Communicator& comm = world.comm(r);
      auto sub = comm.split(r % 2, r);  // {0,2} and {1,3}
      if (!sub.isOk()) {
        first[size_t(r)] = sub.status();
        return;
      }
      if (r == 3) return;  // global rank 3 = rank 1 of group {1,3} never arrives
      std::vector<float> v = {1.0f};
      first[size_t(r)] = (*sub)->allReduce(v);
      later[size_t(r)] = (*sub)->barrier();
    });
  }
  for (auto& t : threads) t.join();
  expectOk(first[0]);
  expectOk(first[2]);
  expectOk(later[0]);
  ASSERT_FALSE(first[1].isOk());
  EXPECT_EQ(first[1].code(), StatusCode::kCancelled);
  EXPECT_NE(first[1].message().find("all_reduce #1"), std::string::npos) << first[1].message();
  EXPECT_NE(first[1].message().find("rank 1 (global rank 3)"), std::string::npos)
      << first[1].message();
  // The aborted group fails later calls at once with the same reason.
  EXPECT_EQ(later[1].code(), StatusCode::kCancelled);
  EXPECT_EQ(later[1].message(), first[1].message());
}

TEST(InProcessComm, FailingRankAbortsPeersWithoutWaitingForTimeout) {
  const auto start = std::chrono::steady_clock::now();
  const Status result = runRanks(
      3,
      [&](Communicator& comm) -> Status {
        MOEWB_ASSIGN_OR_RETURN(auto sub, comm.split(0, comm.rank()));
        if (comm.rank() == 1) {
          std::this_thread::sleep_for(milliseconds(20));
          return invalidArgument("bad batch");
        }
        return sub->barrier();
      },
      milliseconds(30000));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(result.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(result.message(), "rank 1: bad batch");
}

TEST(InProcessComm, ArgumentErrorsAreReportedOnEveryRank) {
  std::vector<Status> statuses(3);
  Status result = runRanks(3, [&](Communicator& comm) {
    const int32_t me = comm.rank();
    // Rank 1 passes a receive buffer of the wrong size.
    std::vector<float> send = {1.0f}, recv(me == 1 ? 2 : 3);
    statuses[size_t(me)] = comm.allGather(send, recv);
    return Status::ok();
  });
  expectOk(result);
  for (const Status& s : statuses) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("all_gather #1 on rank 1"), std::string::npos) << s.message();
  }

  result = runRanks(2, [&](Communicator& comm) {
    const int32_t me = comm.rank();
    // Rank 1 expects 2 elements from rank 0, which sends 1.
    std::vector<int64_t> sendCounts = {1, 1}, displs = {0, 1};
    std::vector<int64_t> recvCounts = {me == 1 ? 2 : 1, 1};
    std::vector<int64_t> recvDispls = {0, 2};
    std::vector<float> send(2), recv(3);
    statuses[size_t(me)] = comm.allToAllV(send, sendCounts, displs, recv, recvCounts, recvDispls);
    return Status::ok();
  });
  expectOk(result);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[size_t(r)].code(), StatusCode::kInvalidArgument);
    EXPECT_NE(statuses[size_t(r)].message().find("rank 1 expects 2 elements from rank 0"),
              std::string::npos)
        << statuses[size_t(r)].message();
  }

  result = runRanks(2, [&](Communicator& comm) {
    const int32_t me = comm.rank();
    std::vector<float> v = {1.0f};
    statuses[size_t(me)] = me == 0 ? comm.barrier() : comm.allReduce(v);
    return Status::ok();
  });
  expectOk(result);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[size_t(r)].code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(statuses[size_t(r)].message().find("rank 0 called barrier #1, rank 1 called all_reduce #1"),
              std::string::npos)
        << statuses[size_t(r)].message();
  }
}

TEST(InProcessComm, SequenceNumbersAndRecords) {
  const int32_t n = 3;
  std::vector<std::vector<CollectiveRecord>> records(n);
  expectOk(runRanks(n, [&](Communicator& comm) {
    const int32_t me = comm.rank();
    comm.setObserver([&records, me](const CollectiveRecord& r) { records[size_t(me)].push_back(r); });
    EXPECT_EQ(comm.lastSequence(), 0u);
    std::vector<float> a2a(size_t(n * 2)), a2aOut(size_t(n * 2));
    MOEWB_RETURN_IF_ERROR(comm.allToAll(a2a, a2aOut));  // #1
    std::vector<int64_t> sendCounts(n), sendDispls(n), recvCounts(n), recvDispls(n);
    int64_t s = 0, t = 0;
    for (int32_t j = 0; j < n; ++j) {
      sendCounts[size_t(j)] = vCount(me, j, n);
      sendDispls[size_t(j)] = s;
      s += sendCounts[size_t(j)];
      recvCounts[size_t(j)] = vCount(j, me, n);
      recvDispls[size_t(j)] = t;
      t += recvCounts[size_t(j)];
    }
    std::vector<float> vs(static_cast<size_t>(s)), vr(static_cast<size_t>(t));
    MOEWB_RETURN_IF_ERROR(comm.allToAllV(vs, sendCounts, sendDispls, vr, recvCounts, recvDispls));
    std::vector<int64_t> g1(4), gOut(size_t(4 * n));
    MOEWB_RETURN_IF_ERROR(comm.allGather(g1, gOut));  // #3, int64
    std::vector<float> rsIn(size_t(5 * n)), rsOut(5);
    MOEWB_RETURN_IF_ERROR(comm.reduceScatter(rsIn, rsOut));  // #4
    std::vector<float> ar(6);
    MOEWB_RETURN_IF_ERROR(comm.allReduce(ar));  // #5
    std::vector<float> bc(7);
    MOEWB_RETURN_IF_ERROR(comm.broadcast(bc, 2));  // #6
    MOEWB_RETURN_IF_ERROR(comm.barrier());         // #7
    EXPECT_EQ(comm.lastSequence(), 7u);
    return Status::ok();
  }));
  const std::vector<std::string> ops = {"all_to_all", "all_to_all_v", "all_gather", "reduce_scatter",
                                        "all_reduce", "broadcast", "barrier"};
  int64_t vSent = 0, vReceived = 0;
  for (int32_t me = 0; me < n; ++me) {
    const auto& rec = records[size_t(me)];
    ASSERT_EQ(rec.size(), ops.size());
    for (size_t i = 0; i < rec.size(); ++i) {
      EXPECT_EQ(rec[i].op, ops[i]);
      EXPECT_EQ(rec[i].seq, i + 1);
      EXPECT_EQ(rec[i].peers, (std::vector<int32_t>{0, 1, 2}));
      EXPECT_LE(rec[i].startNs, rec[i].endNs);
      EXPECT_TRUE(rec[i].ok);
    }
    EXPECT_EQ(rec[0].bytesSent, 2 * 2 * 4);  // 2 floats to each of 2 peers
    EXPECT_EQ(rec[0].bytesReceived, 2 * 2 * 4);
    EXPECT_EQ(rec[0].sendBytesByPeer, (std::vector<int64_t>{8, 8, 8}));
    int64_t sent = 0, received = 0;
    std::vector<int64_t> byPeer;
    for (int32_t j = 0; j < n; ++j) {
      byPeer.push_back(vCount(me, j, n) * 4);
      if (j == me) continue;
      sent += vCount(me, j, n) * 4;
      received += vCount(j, me, n) * 4;
    }
    EXPECT_EQ(rec[1].bytesSent, sent);
    EXPECT_EQ(rec[1].bytesReceived, received);
    EXPECT_EQ(rec[1].sendBytesByPeer, byPeer);
    vSent += rec[1].bytesSent;
    vReceived += rec[1].bytesReceived;
    EXPECT_EQ(rec[2].bytesSent, 2 * 4 * 8);  // 4 int64 to each of 2 peers
    EXPECT_EQ(rec[2].bytesReceived, 2 * 4 * 8);
    EXPECT_EQ(rec[3].bytesSent, 2 * 5 * 4);
    EXPECT_EQ(rec[3].bytesReceived, 2 * 5 * 4);
    EXPECT_EQ(rec[4].bytesSent, 2 * 6 * 4);
    EXPECT_EQ(rec[4].bytesReceived, 2 * 6 * 4);
    EXPECT_EQ(rec[5].bytesSent, me == 2 ? 2 * 7 * 4 : 0);
    EXPECT_EQ(rec[5].bytesReceived, me == 2 ? 0 : 7 * 4);
    EXPECT_EQ(rec[6].bytesSent, 0);
    EXPECT_EQ(rec[6].bytesReceived, 0);
    EXPECT_TRUE(rec[2].sendBytesByPeer.empty());
  }
  EXPECT_EQ(vSent, vReceived);
  EXPECT_GT(vSent, 0);
}

TEST(InProcessComm, FailedCallsTakeASequenceNumberAndRecord) {
  std::vector<CollectiveRecord> records;
  InProcessWorld world(1, milliseconds(200));
  Communicator& comm = world.comm(0);
  comm.setObserver([&](const CollectiveRecord& r) { records.push_back(r); });
  std::vector<float> send(3), recv(2);
  const Status s = comm.allToAll(send, recv);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  expectOk(comm.barrier());
  ASSERT_EQ(records.size(), 2u);
  EXPECT_FALSE(records[0].ok);
  EXPECT_EQ(records[0].seq, 1u);
  EXPECT_TRUE(records[1].ok);
  EXPECT_EQ(records[1].seq, 2u);
  EXPECT_EQ(runRanks(0, [](Communicator&) { return Status::ok(); }).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moewb::engine
