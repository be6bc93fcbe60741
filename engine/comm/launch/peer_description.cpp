// describePeers: the sentence that names missing, dead and lagging ranks (see tcp_store.h).
#include <algorithm>
#include <cstdio>

#include "comm/launch/tcp_store.h"

namespace moewb::engine {
namespace {

std::string secondsText(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", std::max(0.0, seconds));
  return buf;
}

// "rank 3 is alive but behind (progress 41, others 42)" when `peer` trails another alive rank.
std::string stragglerText(const PeerStatus& peer, std::span<const PeerStatus> peers) {
  std::optional<int64_t> othersMin, othersMax;
  for (const PeerStatus& other : peers) {
    if (other.rank == peer.rank || other.state != PeerState::kAlive || !other.progress) continue;
    othersMin = std::min(othersMin.value_or(*other.progress), *other.progress);
    othersMax = std::max(othersMax.value_or(*other.progress), *other.progress);
  }
  if (!othersMax || (peer.progress && *peer.progress >= *othersMax)) return "";
  const std::string mine = peer.progress ? std::to_string(*peer.progress) : "none";
  const std::string others = *othersMin == *othersMax
                                 ? "others " + std::to_string(*othersMax)
                                 : "others up to " + std::to_string(*othersMax);
  return "rank " + std::to_string(peer.rank) + " is alive but behind (progress " + mine + ", " +
         others + ")";
}

}  // namespace

std::string describePeers(std::span<const PeerStatus> peers) {
  std::vector<std::string> parts;
  for (const PeerStatus& peer : peers) {
    if (peer.state == PeerState::kDead) {
      parts.push_back("rank " + std::to_string(peer.rank) +
                      " died (its connection to the store closed " +
                      secondsText(peer.secondsSinceChange) + " s ago)");
    }
  }
  for (const PeerStatus& peer : peers) {
    if (peer.state == PeerState::kLeft) {
      parts.push_back("rank " + std::to_string(peer.rank) + " left (closed its store connection " +
                      secondsText(peer.secondsSinceChange) + " s ago)");
    }
  }
  std::vector<int32_t> notJoined;
  for (const PeerStatus& peer : peers) {
    if (peer.state == PeerState::kNotJoined) notJoined.push_back(peer.rank);
  }
  if (!notJoined.empty()) {
    std::string text = notJoined.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < notJoined.size(); ++i) {
      text += (i ? ", " : "") + std::to_string(notJoined[i]);
    }
    parts.push_back(text + " never connected to the store");
  }
  for (const PeerStatus& peer : peers) {
    if (peer.state != PeerState::kAlive) continue;
    if (std::string text = stragglerText(peer, peers); !text.empty()) parts.push_back(text);
  }
  std::string sentence;
  for (const std::string& part : parts) sentence += (sentence.empty() ? "" : "; ") + part;
  return sentence;
}

}  // namespace moewb::engine
