// joinRendezvous with threads as ranks: three ranks meet on a free port and share bytes from rank
// 0 (as the NCCL id is shared); a missing rank is named; bad environments are refused; a single
// rank needs no port.
#include "comm/launch/rendezvous.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "free_port.h"

namespace moewb::engine {
namespace {

using std::chrono::milliseconds;

LaunchEnv envOf(int32_t rank, int32_t worldSize, uint16_t port) {
  LaunchEnv env;
  env.rank = rank;
  env.worldSize = worldSize;
  env.localRank = rank;
  env.localWorldSize = worldSize;
  env.masterAddr = "127.0.0.1";
  env.masterPort = port;
  env.source = "torchrun-style env";
  return env;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Rendezvous, ThreeRanksMeetAndShareTheIdFromRankZero) {
  const uint16_t port = testing::freeTcpPort();
  ASSERT_NE(port, 0);
  constexpr int32_t kRanks = 3;
  std::vector<std::string> ids(kRanks);
  std::vector<Status> closed(kRanks);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      // Rank 0 comes last: the others retry until its store is up.
      if (r == 0) std::this_thread::sleep_for(milliseconds(150));
      auto session = joinRendezvous(envOf(r, kRanks, port), milliseconds(4000));
      ASSERT_TRUE(session.isOk()) << session.status().toString();
      RendezvousSession& s = **session;
      EXPECT_EQ(s.env().rank, r);
      EXPECT_EQ(s.client().rank(), r);
      EXPECT_EQ(s.client().worldSize(), kRanks);
      EXPECT_EQ(s.server() != nullptr, r == 0);
      const std::string mine = r == 0 ? std::string("nccl-id\0\x01", 9) : std::string();
      auto id = s.shareFromRankZero("nccl/world", mine, milliseconds(3000));
      ASSERT_TRUE(id.isOk()) << id.status().toString();
      ids[size_t(r)] = *id;
      closed[size_t(r)] = s.close(milliseconds(3000));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int32_t r = 0; r < kRanks; ++r) {
    EXPECT_EQ(ids[size_t(r)], std::string("nccl-id\0\x01", 9)) << "rank " << r;
    EXPECT_TRUE(closed[size_t(r)].isOk()) << closed[size_t(r)].toString();
  }
}

TEST(Rendezvous, AMissingRankIsNamed) {
  const uint16_t port = testing::freeTcpPort();
  Status s0, s1;
  std::thread rank1([&] { s1 = joinRendezvous(envOf(1, 3, port), milliseconds(600)).status(); });
  s0 = joinRendezvous(envOf(0, 3, port), milliseconds(600)).status();
  rank1.join();
  EXPECT_FALSE(s1.isOk());  // its own timeout, or the store of rank 0 went away first
  ASSERT_FALSE(s0.isOk());
  EXPECT_EQ(s0.code(), StatusCode::kCancelled);
  EXPECT_TRUE(contains(s0.message(),
                       "rank 0 of 3 (torchrun-style env) did not meet the other "
                       "ranks"))
      << s0.message();
  EXPECT_TRUE(contains(s0.message(), "missing rank 2")) << s0.message();
  EXPECT_TRUE(contains(s0.message(), "rank 2 never connected to the store")) << s0.message();
}

TEST(Rendezvous, RefusesPortZeroForSeveralRanksAndABusyPort) {
  auto zero = joinRendezvous(envOf(1, 2, 0), milliseconds(500));
  ASSERT_FALSE(zero.isOk());
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(zero.status().message(), "master port 0 is only accepted for a single rank"))
      << zero.status().message();
  auto busy = TcpStoreServer::start(0, 1);
  ASSERT_TRUE(busy.isOk());
  auto taken = joinRendezvous(envOf(0, 2, (*busy)->port()), milliseconds(500));
  ASSERT_FALSE(taken.isOk());
  EXPECT_EQ(taken.status().code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(contains(taken.status().message(),
                       "rank 0 of 2 (torchrun-style env) cannot host "
                       "the store"))
      << taken.status().message();
}

TEST(Rendezvous, ASingleRankNeedsNoSharedPort) {
  LaunchEnv env = envOf(0, 1, kDefaultMasterPort);
  env.masterAddr = "some-host-that-is-not-used";
  auto session = joinRendezvous(env, milliseconds(2000));
  ASSERT_TRUE(session.isOk()) << session.status().toString();
  EXPECT_NE((*session)->env().masterPort, 0);
  EXPECT_TRUE((*session)->close(milliseconds(500)).isOk());
}

}  // namespace
}  // namespace moewb::engine
