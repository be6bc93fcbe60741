// TcpStoreServer / TcpStoreClient on loopback with threads as ranks: set/get/add/barrier across
// threads, timeouts that name the key and the missing ranks, ranks that die (client destroyed
// without close()) or leave, the watch callback, stragglers by progress, refused ranks.
#include "comm/launch/tcp_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "free_port.h"

namespace moewb::engine {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kConnectTimeout{3000};

std::unique_ptr<TcpStoreServer> startServer(int32_t worldSize) {
  auto server = TcpStoreServer::start(0, worldSize);
  EXPECT_TRUE(server.isOk()) << server.status().toString();
  return server.isOk() ? std::move(server).value() : nullptr;
}

std::unique_ptr<TcpStoreClient> connectRank(const TcpStoreServer& server, int32_t rank) {
  auto client = TcpStoreClient::connect("127.0.0.1", server.port(), rank, kConnectTimeout);
  EXPECT_TRUE(client.isOk()) << client.status().toString();
  return client.isOk() ? std::move(client).value() : nullptr;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Polls `pred` every 10 ms for up to `limit`; returns whether it became true.
template <typename Pred>
bool eventually(Pred pred, milliseconds limit = milliseconds(1000)) {
  const auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return pred();
}

TEST(TcpStore, SetGetAddAndBarrierAcrossThreads) {
  constexpr int32_t kRanks = 3;
  auto server = startServer(kRanks);
  ASSERT_NE(server, nullptr);
  EXPECT_NE(server->port(), 0);
  std::atomic<int> beforeBarrier{0};
  std::vector<std::string> seen(kRanks);
  std::vector<int64_t> lastAdds(kRanks);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto client = connectRank(*server, r);
      ASSERT_NE(client, nullptr);
      EXPECT_EQ(client->worldSize(), kRanks);
      if (r == 0) {
        std::this_thread::sleep_for(milliseconds(50));  // the others are already waiting in get
        ASSERT_TRUE(client->set("id", std::string("\0bytes\xff", 7)).isOk());
      }
      auto id = client->get("id", milliseconds(3000));
      ASSERT_TRUE(id.isOk()) << id.status().toString();
      seen[size_t(r)] = *id;
      for (int i = 0; i < 50; ++i) {
        auto value = client->add("counter", 2);
        ASSERT_TRUE(value.isOk()) << value.status().toString();
        lastAdds[size_t(r)] = *value;
      }
      for (int round = 0; round < 2; ++round) {  // a barrier name is reusable
        beforeBarrier.fetch_add(1);
        ASSERT_TRUE(client->barrier("b", kRanks, milliseconds(3000)).isOk());
        EXPECT_GE(beforeBarrier.load(), kRanks * (round + 1));
      }
      EXPECT_TRUE(client->close().isOk());
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& value : seen) EXPECT_EQ(value, std::string("\0bytes\xff", 7));
  EXPECT_EQ(*std::max_element(lastAdds.begin(), lastAdds.end()), 2 * 50 * kRanks);
  EXPECT_TRUE(server->waitUntilAllLeft(milliseconds(1000)).isOk());
}

TEST(TcpStore, GetTimesOutNamingTheKeyAndTheStore) {
  auto server = startServer(1);
  ASSERT_NE(server, nullptr);
  auto client = connectRank(*server, 0);
  ASSERT_NE(client, nullptr);
  const auto start = Clock::now();
  auto value = client->get("nccl/world", milliseconds(200));
  ASSERT_FALSE(value.isOk());
  EXPECT_GE(Clock::now() - start, milliseconds(190));
  EXPECT_EQ(value.status().code(), StatusCode::kCancelled);
  const std::string& message = value.status().message();
  EXPECT_TRUE(contains(message, "get 'nccl/world' timed out after 200 ms")) << message;
  EXPECT_TRUE(contains(message, "127.0.0.1:" + std::to_string(server->port()))) << message;
}

TEST(TcpStore, ClientDestroyedWithoutCloseIsDeadWithinASecond) {
  auto server = startServer(3);
  ASSERT_NE(server, nullptr);
  auto c0 = connectRank(*server, 0);
  auto c1 = connectRank(*server, 1);
  auto c2 = connectRank(*server, 2);
  ASSERT_TRUE(c0 && c1 && c2);
  EXPECT_EQ(c0->describeMissingPeers(), "");
  c2.reset();  // as if the process had been killed
  EXPECT_TRUE(eventually([&] {
    auto dead = c0->deadRanks();
    return dead.isOk() && *dead == std::vector<int32_t>{2};
  }));
  const std::string sentence = c1->describeMissingPeers();
  EXPECT_TRUE(contains(sentence, "rank 2 died (its connection to the store closed ")) << sentence;
  EXPECT_TRUE(contains(sentence, " s ago)")) << sentence;
}

TEST(TcpStore, CloseLeavesInsteadOfDying) {
  auto server = startServer(2);
  ASSERT_NE(server, nullptr);
  auto c0 = connectRank(*server, 0);
  auto c1 = connectRank(*server, 1);
  ASSERT_TRUE(c0 && c1);
  ASSERT_TRUE(c1->close().isOk());
  EXPECT_TRUE(c1->close().isOk());  // idempotent
  EXPECT_FALSE(c1->set("k", "v").isOk());
  EXPECT_TRUE(eventually([&] {
    auto peers = c0->peers();
    return peers.isOk() && (*peers)[1].state == PeerState::kLeft;
  }));
  auto dead = c0->deadRanks();
  ASSERT_TRUE(dead.isOk());
  EXPECT_TRUE(dead->empty());
  EXPECT_TRUE(contains(c0->describeMissingPeers(), "rank 1 left")) << c0->describeMissingPeers();
}

TEST(TcpStore, WatchCallsBackOncePerDeadRank) {
  auto server = startServer(3);
  ASSERT_NE(server, nullptr);
  auto c0 = connectRank(*server, 0);
  auto c1 = connectRank(*server, 1);
  auto c2 = connectRank(*server, 2);
  ASSERT_TRUE(c0 && c1 && c2);
  std::mutex mutex;
  std::vector<std::pair<int32_t, std::string>> calls;
  ASSERT_TRUE(c0->watch([&](int32_t rank, std::string reason) {
                  std::lock_guard<std::mutex> lock(mutex);
                  calls.emplace_back(rank, std::move(reason));
                }).isOk());
  EXPECT_FALSE(c0->watch([](int32_t, std::string) {}).isOk());  // one watch per client
  c1.reset();
  EXPECT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> lock(mutex);
    return !calls.empty();
  }));
  std::this_thread::sleep_for(milliseconds(350));  // three more polls: no repeat
  std::lock_guard<std::mutex> lock(mutex);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].first, 1);
  EXPECT_TRUE(contains(calls[0].second, "rank 1 died")) << calls[0].second;
}

TEST(TcpStore, WatchReportsTheStoreVanishing) {
  auto server = startServer(2);
  ASSERT_NE(server, nullptr);
  auto c1 = connectRank(*server, 1);
  ASSERT_NE(c1, nullptr);
  std::atomic<int> calls{0};
  std::atomic<int32_t> rank{0};
  std::string reason;
  std::mutex mutex;
  ASSERT_TRUE(c1->watch([&](int32_t r, std::string why) {
                  std::lock_guard<std::mutex> lock(mutex);
                  rank = r;
                  reason = std::move(why);
                  calls.fetch_add(1);
                }).isOk());
  server.reset();  // rank 0's process is gone
  EXPECT_TRUE(eventually([&] { return calls.load() > 0; }));
  std::lock_guard<std::mutex> lock(mutex);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(rank.load(), -1);
  EXPECT_TRUE(contains(reason, " became unreachable; the rank hosting it")) << reason;
}

TEST(TcpStore, ProgressNamesTheStraggler) {
  auto server = startServer(3);
  ASSERT_NE(server, nullptr);
  auto c0 = connectRank(*server, 0);
  auto c1 = connectRank(*server, 1);
  auto c2 = connectRank(*server, 2);
  ASSERT_TRUE(c0 && c1 && c2);
  ASSERT_TRUE(c0->setProgress(42).isOk());
  ASSERT_TRUE(c1->setProgress(42).isOk());
  ASSERT_TRUE(c2->setProgress(41).isOk());
  EXPECT_EQ(c0->describeMissingPeers(), "rank 2 is alive but behind (progress 41, others 42)");
  ASSERT_TRUE(c2->setProgress(42).isOk());
  EXPECT_EQ(c0->describeMissingPeers(), "");
}

TEST(TcpStore, WholeWorldBarrierFailsAtOnceWhenAMissingRankDied) {
  auto server = startServer(3);
  ASSERT_NE(server, nullptr);
  auto c0 = connectRank(*server, 0);
  auto c1 = connectRank(*server, 1);
  auto c2 = connectRank(*server, 2);
  ASSERT_TRUE(c0 && c1 && c2);
  Status s1;
  std::thread other([&] { s1 = c1->barrier("step", 3, milliseconds(4000)); });
  std::this_thread::sleep_for(milliseconds(50));
  c2.reset();
  const auto start = Clock::now();
  Status s0 = c0->barrier("step", 3, milliseconds(4000));
  other.join();
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  for (const Status& s : {s0, s1}) {
    ASSERT_FALSE(s.isOk());
    EXPECT_EQ(s.code(), StatusCode::kCancelled);
    EXPECT_TRUE(contains(s.message(), "barrier 'step' cannot complete (")) << s.message();
    EXPECT_TRUE(contains(s.message(), "rank 2 died (its connection to the store closed"))
        << s.message();
  }
}

TEST(TcpStore, BarrierTimeoutNamesTheRanksThatNeverCame) {
  auto server = startServer(3);
  ASSERT_NE(server, nullptr);
  auto c0 = connectRank(*server, 0);
  ASSERT_NE(c0, nullptr);
  Status s = c0->barrier("rendezvous", 3, milliseconds(200));
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kCancelled);
  EXPECT_TRUE(contains(s.message(), "1 of 3 ranks arrived; missing ranks 1, 2")) << s.message();
  EXPECT_TRUE(contains(s.message(), "ranks 1, 2 never connected to the store")) << s.message();
  Status bad = c0->barrier("x", 4, milliseconds(100));
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(bad.message(), "count 4 is outside 1..3")) << bad.message();
}

TEST(TcpStore, RefusesARankOutsideTheWorldAndADuplicateRank) {
  auto server = startServer(2);
  ASSERT_NE(server, nullptr);
  auto outside = TcpStoreClient::connect("127.0.0.1", server->port(), 2, kConnectTimeout);
  ASSERT_FALSE(outside.isOk());
  EXPECT_EQ(outside.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(outside.status().message(), "rank 2 is outside this store's world of 2"))
      << outside.status().message();
  auto first = connectRank(*server, 1);
  ASSERT_NE(first, nullptr);
  auto twin = TcpStoreClient::connect("127.0.0.1", server->port(), 1, kConnectTimeout);
  ASSERT_FALSE(twin.isOk());
  EXPECT_TRUE(contains(twin.status().message(), "rank 1 is already connected from another"))
      << twin.status().message();
  EXPECT_FALSE(TcpStoreServer::start(0, 0).isOk());
}

TEST(TcpStore, ConnectTimesOutNamingHostAndPort) {
  const uint16_t port = testing::freeTcpPort();
  const auto start = Clock::now();
  auto client = TcpStoreClient::connect("127.0.0.1", port, 0, milliseconds(300));
  ASSERT_FALSE(client.isOk());
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  EXPECT_EQ(client.status().code(), StatusCode::kCancelled);
  EXPECT_TRUE(contains(client.status().message(),
                       "cannot reach the store at 127.0.0.1:" + std::to_string(port)))
      << client.status().message();
}

TEST(TcpStore, ConnectWaitsForAServerThatStartsLate) {
  const uint16_t port = testing::freeTcpPort();
  std::unique_ptr<TcpStoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(milliseconds(200));
    auto started = TcpStoreServer::start(port, 1);
    ASSERT_TRUE(started.isOk()) << started.status().toString();
    server = std::move(started).value();
  });
  auto client = TcpStoreClient::connect("127.0.0.1", port, 0, milliseconds(3000));
  starter.join();
  ASSERT_TRUE(client.isOk()) << client.status().toString();
  EXPECT_TRUE((*client)->close().isOk());
}

TEST(TcpStore, SecondServerOnATakenPortIsRefused) {
  auto server = startServer(1);
  ASSERT_NE(server, nullptr);
  auto second = TcpStoreServer::start(server->port(), 1);
  ASSERT_FALSE(second.isOk());
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(
      contains(second.status().message(), std::to_string(server->port()) + " is already in use"))
      << second.status().message();
}

TEST(TcpStore, AddRefusesAValueThatIsNotACounter) {
  auto server = startServer(1);
  ASSERT_NE(server, nullptr);
  auto client = connectRank(*server, 0);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->set("name", "abc").isOk());
  auto added = client->add("name", 1);
  ASSERT_FALSE(added.isOk());
  EXPECT_EQ(added.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(added.status().message(), "add 'name': the key holds 'abc'"))
      << added.status().message();
  auto fresh = client->add("fresh", -5);
  ASSERT_TRUE(fresh.isOk());
  EXPECT_EQ(*fresh, -5);
  auto text = client->get("fresh", milliseconds(100));
  ASSERT_TRUE(text.isOk());
  EXPECT_EQ(*text, "-5");
}

}  // namespace
}  // namespace moewb::engine
