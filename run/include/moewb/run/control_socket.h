// ControlServer: the live-control socket of a running TrainingRun, so a headless run (`moewb run
// --control PATH`) can be paused, stepped, stopped, patched and asked its state from outside
// (`moewb ctl PATH ...`, socat, a script). It speaks the line protocol of control_protocol.h over
// a Unix domain stream socket that it creates at PATH (mode 0600: only the run's user connects).
//
// Lifecycle: listen() checks the path and binds before the run exists (so a bad path is refused
// before the trace is created; connections made before start() wait in the backlog), start()
// answers on a thread of its own, stop() (or the destructor) ends that thread within about
// Options::pollMs, answers requests still waiting for the trainer with an error, closes every
// connection and removes the socket file. Call stop() after TrainingRun::run() returned and
// before the run is destroyed.
//
// The thread never blocks on a client or on the trainer: it polls the listening socket and up to
// Options::maxClients connections with a timeout, reads what arrived, writes without waiting, and
// checks the trainer's verdicts (std::future<Status>) without waiting for them; requests of one
// connection are answered in order, one at a time. A silent client is closed after
// Options::idleTimeoutMs without a request; one that sends an over-long line gets an error and is
// closed. The training loop only sees what TrainingRun::post queues at a step boundary.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "moewb/base/status.h"

namespace moewb::run {

class TrainingRun;

// The longest socket path, in bytes: sockaddr_un::sun_path holds 108 bytes on Linux, with the
// terminating NUL.
inline constexpr size_t kControlMaxPathBytes = 107;

class ControlServer {
 public:
  struct Options {
    int32_t maxClients = 16;         // connections served at once; more are answered with an error
    int64_t idleTimeoutMs = 60'000;  // a connection with no complete request for this long closes
    int32_t pollMs = 50;             // how long the thread sleeps in poll; bounds how late stop is
  };

  // Creates the socket at `path` and listens on it (nothing is served before start()). An
  // existing socket that nobody listens at (a run that was killed) is replaced. Errors, naming the
  // path and what is accepted: kInvalidArgument (empty, longer than kControlMaxPathBytes, its
  // directory is not a directory), kNotFound (its directory does not exist), kAlreadyExists (a
  // file that is not a socket is there, or a run already listens there), kFailedPrecondition or
  // kInternal (the system refused: permissions, ...). Nothing is left at `path` on error.
  static Result<std::unique_ptr<ControlServer>> listen(const std::string& path);
  static Result<std::unique_ptr<ControlServer>> listen(const std::string& path, Options options);
  // stop(), then closes the listening socket and removes the socket file.
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Starts answering requests for `run` on a thread of its own; `run` must outlive stop().
  // kFailedPrecondition when started before, or stopped. Call from the controlling thread.
  Status start(TrainingRun& run);
  // Ends the thread (within about Options::pollMs), answers requests still waiting for the
  // trainer with "error: the run ended ...", closes every connection and removes the socket file.
  // Idempotent; call from the controlling thread.
  void stop();

  // Removes the socket file when it is still the one this server created (not a file someone put
  // there since). Thread-safe; for a process about to end without destructors (a stuck rank).
  void removeSocketFile();

  const std::string& path() const { return m_path; }

 private:
  ControlServer(std::string path, int listenFd, uint64_t device, uint64_t inode, Options options);
  void serve(TrainingRun* run);

  std::string m_path;
  int m_listenFd = -1;
  uint64_t m_device = 0;  // st_dev / st_ino of the socket file this server bound
  uint64_t m_inode = 0;
  Options m_options;
  std::thread m_thread;
  std::atomic<bool> m_stopRequested{false};
  bool m_started = false;
  bool m_stopped = false;
};

}  // namespace moewb::run
