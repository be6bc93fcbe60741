// ControlSession (control_session.h): one client connection of a run's control socket.
#include "control_session.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "moewb/base/text.h"
#include "moewb/engine/trainer.h"
#include "moewb/run/training_run.h"

namespace moewb::run {
namespace {

// Answers waiting to be written beyond this stop the session from reading more requests, so a
// client that writes and never reads cannot grow the buffer without bound.
constexpr size_t kMaxPendingOutputBytes = 64 * 1024;

engine::TrainerCommand::Kind commandKind(ControlVerb verb) {
  using Kind = engine::TrainerCommand::Kind;
  switch (verb) {
    case ControlVerb::kPause: return Kind::kPause;
    case ControlVerb::kResume: return Kind::kResume;
    case ControlVerb::kStep: return Kind::kStep;
    case ControlVerb::kStop: return Kind::kStop;
    default: return Kind::kApplyPatch;
  }
}

}  // namespace

ControlSession::ControlSession(int fd, ControlContext& context, int64_t nowMs)
    : m_fd(fd), m_context(context), m_lastRequestMs(nowMs) {}

ControlSession::~ControlSession() {
  if (m_fd >= 0) ::close(m_fd);
}

short ControlSession::pollEvents() const {
  short events = 0;
  const bool takesInput = !m_verdict && !m_closing && !m_peerDone;
  if (takesInput && m_out.size() < kMaxPendingOutputBytes) events |= POLLIN;
  if (!m_out.empty()) events |= POLLOUT;
  return events;
}

bool ControlSession::service(short revents, int64_t nowMs) {
  if ((revents & POLLNVAL) != 0) return false;
  if ((revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !readInput(nowMs)) return false;
  if (m_verdict) {
    answerVerdict();
    if (!m_verdict) m_lastRequestMs = nowMs;  // a slow step is not the client's idle time
  }
  takeLines();
  if (m_peerDone && !m_verdict && !m_closing) {
    if (!m_in.empty()) {  // never act on half a request: "set optim.lr=0.0" may be cut short
      answer(controlError(invalidArgument("the connection ended in the middle of a request "
                                          "line; nothing was done with it")));
      m_in.clear();
    }
    m_closing = true;
  }
  if (!m_verdict && !m_closing && nowMs - m_lastRequestMs > m_context.idleTimeoutMs) {
    answer(controlError(cancelled("no request for " + std::to_string(m_context.idleTimeoutMs) +
                                  " ms; closing the connection")));
    m_closing = true;
  }
  if (!flushOutput()) return false;
  return !(m_closing && m_out.empty());
}

void ControlSession::finish() {
  if (m_verdict) {
    if (m_verdict->wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      answerVerdict();
    } else {
      m_verdict.reset();
      answer(controlError(failedPrecondition("the run ended before the command was handled")));
    }
  }
  (void)flushOutput();
}

bool ControlSession::readInput(int64_t nowMs) {
  char buffer[4096];
  const ssize_t n = ::recv(m_fd, buffer, sizeof buffer, MSG_DONTWAIT);
  if (n > 0) {
    m_in.append(buffer, size_t(n));
    if (m_in.find('\n') != std::string::npos) m_lastRequestMs = nowMs;
    return true;
  }
  if (n == 0) {
    m_peerDone = true;
    return true;
  }
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

void ControlSession::takeLines() {
  while (!m_verdict && !m_closing) {
    const size_t newline = m_in.find('\n');
    const size_t lineBytes = newline == std::string::npos ? m_in.size() : newline;
    if (lineBytes > kControlMaxLineBytes + 1) {  // + 1: a '\r' before the '\n'
      answer(controlError(invalidArgument(
          "request line longer than " + std::to_string(kControlMaxLineBytes) +
          " bytes; closing the connection")));
      m_in.clear();
      m_closing = true;
      return;
    }
    if (newline == std::string::npos) return;
    const std::string line = m_in.substr(0, newline);
    m_in.erase(0, newline + 1);
    startRequest(line);
  }
}

void ControlSession::startRequest(std::string_view line) {
  Result<ControlRequest> request = parseControlRequest(line);
  if (!request.isOk()) {
    answer(controlError(request.status()));
    return;
  }
  switch (request->verb) {
    case ControlVerb::kStatus: answer(controlOk(statusDetail())); return;
    case ControlVerb::kKeys: answer(controlOk(joinText(m_context.liveKeys, " "))); return;
    default: break;
  }
  engine::TrainerCommand command;
  command.kind = commandKind(request->verb);
  command.assignments = std::move(request->assignments);
  command.source = request->source.empty() ? "cli" : request->source;  // `set`: "cli"
  m_waitingVerb = request->verb;
  m_verdict = m_context.run->post(std::move(command));
  answerVerdict();
}

void ControlSession::answerVerdict() {
  if (m_verdict->wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  const Status verdict = m_verdict->get();
  m_verdict.reset();
  if (verdict.isOk() && m_waitingVerb == ControlVerb::kStop) m_context.stopAccepted.store(true);
  answer(verdict.isOk() ? controlOk() : controlError(verdict));
}

bool ControlSession::flushOutput() {
  while (!m_out.empty()) {
    const ssize_t n = ::send(m_fd, m_out.data(), m_out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      m_out.erase(0, size_t(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);  // else the client is gone
    }
  }
  return true;
}

void ControlSession::answer(const std::string& line) { m_out += line + "\n"; }

std::string ControlSession::statusDetail() const {
  const TrainingRun& run = *m_context.run;
  const char* state = run.paused()                         ? "paused"
                      : m_context.stopAccepted.load()      ? "stopping"
                                                           : "running";
  return std::string("state=") + state + " step=" + std::to_string(run.stepsDone()) +
         " planned=" + std::to_string(m_context.plannedSteps) +
         " committed=" + std::to_string(run.committedSteps()) + " backend=" + m_context.backend +
         " trace=" + m_context.tracePath;
}

}  // namespace moewb::run
