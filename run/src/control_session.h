// ControlSession: one connection to a run's control socket (control_socket.h), owned by the
// server's thread. It buffers what the client sent, takes complete lines one at a time, answers
// `status` and `keys` at once and the trainer's commands when their verdict (a std::future) is
// ready, and writes answers without blocking. Nothing here waits: the server polls the session's
// descriptor and calls service() when it is ready or the poll times out.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moewb/run/control_protocol.h"

namespace moewb::run {

class TrainingRun;

// What every session of one server shares: the run and what does not change while it goes on.
struct ControlContext {
  TrainingRun* run = nullptr;
  int64_t plannedSteps = 0;
  std::string backend;
  std::string tracePath;
  std::vector<std::string> liveKeys;
  std::atomic<bool> stopAccepted{false};  // a `stop` request was taken by the trainer
  int64_t idleTimeoutMs = 0;
};

class ControlSession {
 public:
  // Takes ownership of the connected, non-blocking descriptor `fd`. `context` outlives it.
  ControlSession(int fd, ControlContext& context, int64_t nowMs);
  ~ControlSession();
  ControlSession(const ControlSession&) = delete;
  ControlSession& operator=(const ControlSession&) = delete;

  int fd() const { return m_fd; }
  // The poll events this session waits for: POLLIN while it takes requests, POLLOUT while
  // answers wait to be written; 0 while it only waits for a verdict.
  short pollEvents() const;
  // Reads (when `revents` says so), answers what can be answered, writes what it can. Returns
  // false when the session is over and should be destroyed.
  bool service(short revents, int64_t nowMs);
  // The run is over: a request still waiting for the trainer gets an error answer; then one
  // attempt to write what is left.
  void finish();

 private:
  bool readInput(int64_t nowMs);
  void takeLines();
  void startRequest(std::string_view line);
  void answerVerdict();
  bool flushOutput();
  void answer(const std::string& line);
  std::string statusDetail() const;

  int m_fd = -1;
  ControlContext& m_context;
  std::string m_in;   // received bytes not yet taken as a request
  std::string m_out;  // answer bytes not yet written
  std::optional<std::future<Status>> m_verdict;  // the request waiting for the trainer
  ControlVerb m_waitingVerb = ControlVerb::kStatus;
  bool m_peerDone = false;  // the client closed its side
  bool m_closing = false;   // close once m_out is written
  int64_t m_lastRequestMs = 0;
};

}  // namespace moewb::run
