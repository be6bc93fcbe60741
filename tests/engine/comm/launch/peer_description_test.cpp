// describePeers: the sentence naming dead, departed, absent and lagging ranks, in that order.
#include <gtest/gtest.h>

#include "comm/launch/tcp_store.h"

namespace moewb::engine {
namespace {

PeerStatus peer(int32_t rank, PeerState state, std::optional<int64_t> progress = {},
                double seconds = 0) {
  PeerStatus p;
  p.rank = rank;
  p.state = state;
  p.progress = progress;
  p.secondsSinceChange = seconds;
  return p;
}

TEST(PeerDescription, EmptyWhenEveryoneIsAliveAndLevel) {
  std::vector<PeerStatus> peers = {peer(0, PeerState::kAlive, 7), peer(1, PeerState::kAlive, 7)};
  EXPECT_EQ(describePeers(peers), "");
  peers = {peer(0, PeerState::kAlive), peer(1, PeerState::kAlive)};
  EXPECT_EQ(describePeers(peers), "");
}

TEST(PeerDescription, NamesDeadThenLeftThenAbsentThenBehind) {
  std::vector<PeerStatus> peers = {
      peer(0, PeerState::kAlive, 42),      peer(1, PeerState::kLeft, 42, 2.0),
      peer(2, PeerState::kDead, 40, 0.84), peer(3, PeerState::kAlive, 41),
      peer(4, PeerState::kNotJoined),      peer(5, PeerState::kNotJoined)};
  EXPECT_EQ(describePeers(peers),
            "rank 2 died (its connection to the store closed 0.8 s ago); "
            "rank 1 left (closed its store connection 2.0 s ago); "
            "ranks 4, 5 never connected to the store; "
            "rank 3 is alive but behind (progress 41, others 42)");
}

TEST(PeerDescription, StragglersAgainstUnevenOthersAndWithoutProgress) {
  std::vector<PeerStatus> peers = {peer(0, PeerState::kAlive, 43), peer(1, PeerState::kAlive, 42),
                                   peer(2, PeerState::kAlive)};
  EXPECT_EQ(describePeers(peers),
            "rank 1 is alive but behind (progress 42, others 43); "
            "rank 2 is alive but behind (progress none, others up to 43)");
}

}  // namespace
}  // namespace moewb::engine
