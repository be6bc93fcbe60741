// ControlServer (control_socket.h): the socket file, its checks, and the thread that polls the
// listening socket and the sessions (control_session.h).
#include "moewb/run/control_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "control_address.h"
#include "control_session.h"
#include "moewb/run/training_run.h"

namespace moewb::run {
namespace {

static_assert(kControlMaxPathBytes + 1 == sizeof(sockaddr_un::sun_path),
              "kControlMaxPathBytes must follow sun_path");

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string systemError(const std::string& what, int error) {
  return what + ": " + std::strerror(error);
}

// Whether something accepts connections at the socket file `path`.
bool someoneListens(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const sockaddr_un address = controlAddress(path);
  const bool connected =
      ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return connected;
}

Status checkDirectory(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) {
    if (errno == ENOENT) {
      return notFound("the directory '" + dir + "' of control socket path '" + path +
                      "' does not exist; accepted: a path in an existing directory");
    }
    return failedPrecondition(systemError("control socket directory '" + dir + "'", errno));
  }
  if (!S_ISDIR(info.st_mode)) {
    return invalidArgument("'" + dir + "' in control socket path '" + path +
                           "' is not a directory; accepted: a path in an existing directory");
  }
  return Status::ok();
}

// Ok when `path` is free, or held by a stale socket (removed here): one nobody listens at.
Status clearStaleSocket(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    return errno == ENOENT ? Status::ok()
                           : failedPrecondition(systemError("control socket '" + path + "'",
                                                            errno));
  }
  if (!S_ISSOCK(info.st_mode)) {
    return alreadyExists("control socket path '" + path + "' exists and is not a socket; "
                         "accepted: a new path, or the stale socket of a run that ended (other "
                         "files are never replaced)");
  }
  if (someoneListens(path)) {
    return alreadyExists("a run already listens at control socket '" + path +
                         "'; accepted: a path no running run listens at");
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return failedPrecondition(systemError("removing the stale control socket '" + path + "'",
                                          errno));
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<ControlServer>> ControlServer::listen(const std::string& path) {
  return listen(path, Options{});
}

Result<std::unique_ptr<ControlServer>> ControlServer::listen(const std::string& path,
                                                             Options options) {
  if (path.empty()) return invalidArgument("empty control socket path; accepted: a file path");
  if (path.size() > kControlMaxPathBytes) {
    return invalidArgument("control socket path '" + path + "' is " +
                           std::to_string(path.size()) + " bytes; a Unix socket path holds at "
                           "most " + std::to_string(kControlMaxPathBytes) +
                           " bytes (sun_path); accepted: a shorter path, e.g. under /tmp");
  }
  if (path.find('\0') != std::string::npos) {
    return invalidArgument("control socket path holds a NUL byte");
  }
  MOEWB_RETURN_IF_ERROR(checkDirectory(path));
  MOEWB_RETURN_IF_ERROR(clearStaleSocket(path));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return internalError(systemError("creating the control socket", errno));
  const sockaddr_un address = controlAddress(path);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    const int error = errno;
    ::close(fd);
    if (error == EADDRINUSE) {
      return alreadyExists("control socket path '" + path + "' was taken while starting; "
                           "accepted: a path no other program uses");
    }
    return failedPrecondition(systemError("binding control socket '" + path + "'", error));
  }
  struct stat info {};
  const bool bound = ::lstat(path.c_str(), &info) == 0;
  if (!bound || ::chmod(path.c_str(), 0600) != 0 || ::listen(fd, 16) != 0) {
    const int error = errno;
    ::close(fd);
    if (bound) ::unlink(path.c_str());
    return internalError(systemError("listening on control socket '" + path + "'", error));
  }
  return std::unique_ptr<ControlServer>(
      new ControlServer(path, fd, uint64_t(info.st_dev), uint64_t(info.st_ino), options));
}

ControlServer::ControlServer(std::string path, int listenFd, uint64_t device, uint64_t inode,
                             Options options)
    : m_path(std::move(path)),
      m_listenFd(listenFd),
      m_device(device),
      m_inode(inode),
      m_options(options) {}

ControlServer::~ControlServer() {
  stop();
  if (m_listenFd >= 0) ::close(m_listenFd);
  removeSocketFile();
}

Status ControlServer::start(TrainingRun& run) {
  if (m_started || m_stopped) {
    return failedPrecondition("control socket '" + m_path + "' was started before");
  }
  m_started = true;
  m_thread = std::thread([this, &run] { serve(&run); });
  return Status::ok();
}

void ControlServer::stop() {
  if (m_stopped) return;
  m_stopped = true;
  m_stopRequested.store(true);
  if (m_thread.joinable()) m_thread.join();
  removeSocketFile();
}

void ControlServer::removeSocketFile() {
  struct stat info {};
  if (::lstat(m_path.c_str(), &info) != 0) return;
  if (uint64_t(info.st_dev) == m_device && uint64_t(info.st_ino) == m_inode) {
    ::unlink(m_path.c_str());
  }
}

void ControlServer::serve(TrainingRun* run) {
  ControlContext context;
  context.run = run;
  context.plannedSteps = run->plannedSteps();
  context.backend = run->backendName();
  std::error_code ignored;  // a client may sit in another directory: the trace's absolute path
  const std::filesystem::path trace = std::filesystem::absolute(run->tracePath(), ignored);
  context.tracePath = trace.empty() ? run->tracePath() : trace.string();
  context.liveKeys = run->liveKeysOfThisRun();
  context.idleTimeoutMs = m_options.idleTimeoutMs;
  std::vector<std::unique_ptr<ControlSession>> sessions;
  std::vector<pollfd> fds;
  while (!m_stopRequested.load()) {
    fds.assign(1, pollfd{m_listenFd, POLLIN, 0});
    for (const auto& session : sessions) {
      const short events = session->pollEvents();
      // A session that only waits for the trainer is left out: poll would report its hang-up
      // at once, every time, and spin.
      fds.push_back(pollfd{events != 0 ? session->fd() : -1, events, 0});
    }
    const int ready = ::poll(fds.data(), fds.size(), m_options.pollMs);
    if (ready < 0 && errno != EINTR) {  // cannot happen with valid descriptors; do not spin
      std::this_thread::sleep_for(std::chrono::milliseconds(m_options.pollMs));
    }
    const int64_t now = nowMs();
    std::vector<std::unique_ptr<ControlSession>> kept;
    for (size_t i = 0; i < sessions.size(); ++i) {
      const short revents = ready > 0 ? fds[i + 1].revents : 0;
      if (sessions[i]->service(revents, now)) kept.push_back(std::move(sessions[i]));
    }
    sessions = std::move(kept);
    if (ready > 0 && (fds[0].revents & POLLIN) != 0) {
      for (int accepted = 0; accepted < m_options.maxClients; ++accepted) {
        const int fd = ::accept4(m_listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;  // EAGAIN: no more waiting; others: the client left already
        if (sessions.size() >= size_t(m_options.maxClients)) {
          const std::string refusal = "error: too many connections (" +
                                      std::to_string(m_options.maxClients) + "); try again\n";
          (void)::send(fd, refusal.data(), refusal.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
          ::close(fd);
          continue;
        }
        sessions.push_back(std::make_unique<ControlSession>(fd, context, now));
      }
    }
  }
  for (auto& session : sessions) session->finish();
}

}  // namespace moewb::run
