// ControlServer on a real Unix socket in a temp dir against a real CPU run of tiny.toml: status,
// pause / step / resume, a live patch recorded with source "cli" (`apply`: "tuner"), the
// trainer's refusal of a non-live key, keys, junk on the wire (unknown verbs, non-UTF-8 bytes,
// over-long lines, a client that disconnects mid-line or says nothing), stop, and the socket
// file's life (removed at the end; a regular file, a live socket, a missing directory or a long
// path refused; a stale socket replaced). Waits are on conditions with generous deadlines, never
// fixed sleeps.
#include "moewb/run/control_socket.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "../source_dir.h"
#include "moewb/engine/trainer.h"
#include "moewb/run/control_client.h"
#include "moewb/run/training_run.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::run {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int64_t kAnswerTimeoutMs = 60'000;

// Polls `done` until it holds or 60 s passed; returns its last value.
bool waitFor(const std::function<bool()>& done) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!done() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

// "ok state=paused step=7 ..." -> the value of `key` ("" when missing).
std::string field(const std::string& answer, const std::string& key) {
  const size_t at = answer.find(" " + key + "=");
  if (at == std::string::npos) return "";
  const size_t start = at + key.size() + 2;
  return key == "trace" ? answer.substr(start)
                        : answer.substr(start, answer.find(' ', start) - start);
}

// A client that writes raw bytes and reads raw answers.
class RawClient {
 public:
  explicit RawClient(const std::string& path) {
    m_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.data(), path.size());
    m_connected = ::connect(m_fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  }
  ~RawClient() { close(); }
  bool connected() const { return m_connected; }
  void close() {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = -1;
  }
  void shutdownWrite() { ::shutdown(m_fd, SHUT_WR); }
  bool send(const std::string& bytes) {
    return ::send(m_fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size());
  }
  // The next answer line, or nullopt when the server closed the connection or 60 s passed.
  std::optional<std::string> readLine() {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    for (;;) {
      const size_t newline = m_in.find('\n');
      if (newline != std::string::npos) {
        std::string line = m_in.substr(0, newline);
        m_in.erase(0, newline + 1);
        return line;
      }
      if (!readSome(deadline)) return std::nullopt;
    }
  }
  // True when the server closes the connection (after any answers) within 60 s.
  bool closedByServer() {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (readSome(deadline)) {
    }
    return m_eof;
  }

 private:
  bool readSome(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd item{m_fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&item, 1, int(left.count())) <= 0) return false;
    char buffer[4096];
    const ssize_t n = ::recv(m_fd, buffer, sizeof buffer, 0);
    if (n <= 0) {
      m_eof = true;
      return false;
    }
    m_in.append(buffer, size_t(n));
    return true;
  }

  int m_fd = -1;
  bool m_connected = false;
  bool m_eof = false;
  std::string m_in;
};

class ControlSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    m_dir = fs::temp_directory_path() /
            ("moewb-ctl-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(m_dir);
    fs::create_directories(m_dir);
    m_socket = (m_dir / "control.sock").string();
    m_trace = (m_dir / "trace.sqlite").string();
  }
  void TearDown() override {
    finishRun();
    fs::remove_all(m_dir);
  }

  // Listens at m_socket, creates a tiny.toml run of `steps` steps and trains it on a thread.
  void startRun(int64_t steps = 1'000'000, ControlServer::Options options = {}) {
    auto server = ControlServer::listen(m_socket, options);
    ASSERT_TRUE(server.isOk()) << server.status().toString();
    m_server = std::move(*server);
    auto config = engine::loadConfigFile(moewb::test::sourceDir() + "/samples/configs/tiny.toml");
    ASSERT_TRUE(config.isOk()) << config.status().toString();
    ASSERT_TRUE(engine::applyOverride(*config, "run.threads=1").isOk());
    auto run = TrainingRun::create(*config, {.outPath = m_trace, .steps = steps});
    ASSERT_TRUE(run.isOk()) << run.status().toString();
    m_run = std::move(*run);
    ASSERT_TRUE(m_server->start(*m_run).isOk());
    m_thread = std::thread([this] {
      m_summary.emplace(m_run->run());
      m_runEnded.store(true);
    });
  }
  // As the CLI does: waits for the run (stopping it when asked), then stops the server.
  void finishRun(bool requestStop = true) {
    if (m_thread.joinable()) {
      if (requestStop) m_run->requestStop();
      m_thread.join();
    }
    if (m_server) m_server->stop();
  }

  std::string ask(const std::string& request) {
    Result<std::string> answer = askControlSocket(m_socket, request, kAnswerTimeoutMs);
    return answer.isOk() ? *answer : "client failed: " + answer.status().toString();
  }
  int64_t stepNow() {
    const std::string step = field(ask("status"), "step");
    return step.empty() ? -1 : std::stoll(step);
  }
  // True when status says `step` on every ask over a second (about ten tiny steps on one
  // thread, so a run that did not hold would show it) and 20 asks at least.
  bool holdsFor(int64_t step) {
    const auto until = Clock::now() + std::chrono::seconds(1);
    for (int asks = 0; asks < 20 || Clock::now() < until; ++asks) {
      if (stepNow() != step) return false;
    }
    return true;
  }
  std::vector<storage::ConfigChangeRow> configChanges() {
    auto reader = storage::TraceReader::open(m_trace);
    if (!reader.isOk()) return {};
    auto rows = (*reader)->configChanges();
    return rows.isOk() ? *rows : std::vector<storage::ConfigChangeRow>{};
  }
  // Starts the run, pauses it after its first step, sends `patch` and stops the run; returns
  // the step the patch took effect at (the paused step) and the answer to the patch in `answer`.
  int64_t patchWhilePausedThenStop(const std::string& patch, std::string& answer) {
    startRun();
    EXPECT_TRUE(waitFor([&] { return stepNow() >= 1; }));
    EXPECT_EQ(ask("pause"), "ok");
    const int64_t at = stepNow();
    answer = ask(patch);
    EXPECT_EQ(ask("stop"), "ok");
    finishRun(false);
    return at;
  }
  std::string runStatus() {
    auto reader = storage::TraceReader::open(m_trace);
    if (!reader.isOk()) return reader.status().toString();
    auto runs = (*reader)->runs();
    return runs.isOk() && !runs->empty() ? runs->front().status : "no run";
  }

  fs::path m_dir;
  std::string m_socket;
  std::string m_trace;
  std::unique_ptr<ControlServer> m_server;
  std::unique_ptr<TrainingRun> m_run;
  std::thread m_thread;
  std::optional<Result<RunSummary>> m_summary;
  std::atomic<bool> m_runEnded{false};
};

TEST_F(ControlSocketTest, StatusNamesStepsStateBackendAndTrace) {
  startRun();
  ASSERT_TRUE(waitFor([&] { return stepNow() >= 1; }));
  const std::string status = ask("status");
  EXPECT_EQ(status.rfind("ok ", 0), 0u) << status;
  EXPECT_EQ(field(status, "state"), "running") << status;
  EXPECT_EQ(field(status, "planned"), "1000000") << status;
  EXPECT_EQ(field(status, "backend"), "cpu") << status;
  EXPECT_EQ(fs::path(field(status, "trace")), fs::absolute(m_trace)) << status;
  EXPECT_FALSE(field(status, "committed").empty()) << status;
  EXPECT_TRUE(fs::exists(m_socket));
}

TEST_F(ControlSocketTest, PauseHoldsTheStepAndStepAdvancesExactlyOne) {
  startRun();
  ASSERT_TRUE(waitFor([&] { return stepNow() >= 2; }));
  ASSERT_EQ(ask("pause"), "ok");
  const std::string paused = ask("status");
  EXPECT_EQ(field(paused, "state"), "paused") << paused;
  const int64_t held = std::stoll(field(paused, "step"));
  // Every step computed before the pause reaches the file; none after it.
  ASSERT_TRUE(waitFor([&] { return m_run->committedSteps() == held; }));
  EXPECT_TRUE(holdsFor(held));
  EXPECT_EQ(m_run->stepsDone(), held);

  ASSERT_EQ(ask("step"), "ok");
  ASSERT_TRUE(waitFor([&] {
    const std::string s = ask("status");
    return field(s, "step") == std::to_string(held + 1) && field(s, "state") == "paused";
  }));
  ASSERT_TRUE(waitFor([&] { return m_run->committedSteps() == held + 1; }));
  EXPECT_TRUE(holdsFor(held + 1));

  ASSERT_EQ(ask("resume"), "ok");
  EXPECT_TRUE(waitFor([&] { return stepNow() >= held + 3; }));
  EXPECT_EQ(field(ask("status"), "state"), "running");
}

TEST_F(ControlSocketTest, SetAppliesAPatchRecordedWithSourceCli) {
  std::string answer;
  const int64_t at = patchWhilePausedThenStop("set optim.lr=1e-3 optim.warmup_steps=5", answer);
  EXPECT_EQ(answer, "ok");
  ASSERT_TRUE(m_summary && m_summary->isOk());
  const std::vector<storage::ConfigChangeRow> rows = configChanges();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].key, "optim.lr");
  EXPECT_EQ(rows[0].source, "cli");
  EXPECT_EQ(rows[0].step, at);
  EXPECT_DOUBLE_EQ(std::stod(rows[0].oldValue), 3e-3);
  EXPECT_DOUBLE_EQ(std::stod(rows[0].newValue), 1e-3);
  EXPECT_EQ(rows[1].key, "optim.warmup_steps");
  EXPECT_EQ(rows[1].source, "cli");
  EXPECT_EQ(rows[1].newValue, "5");
}

TEST_F(ControlSocketTest, ApplySendsOnePatchRecordedWithSourceTuner) {
  std::string answer;
  const int64_t at =
      patchWhilePausedThenStop("apply optim.lr=2e-3 moe.capacity_factor=0.5", answer);
  EXPECT_EQ(answer, "ok");
  ASSERT_TRUE(m_summary && m_summary->isOk());
  const std::vector<storage::ConfigChangeRow> rows = configChanges();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].key, "optim.lr");
  EXPECT_EQ(rows[1].key, "moe.capacity_factor");
  for (const storage::ConfigChangeRow& row : rows) {
    EXPECT_EQ(row.source, "tuner");
    EXPECT_EQ(row.step, at);
  }
}

TEST_F(ControlSocketTest, ARefusedPatchAnswersTheTrainersMessageAndChangesNothing) {
  startRun();
  const std::string nonLive = ask("set model.d_model=32");
  EXPECT_EQ(nonLive.rfind("error: model.d_model cannot change while the run goes on", 0), 0u)
      << nonLive;
  EXPECT_NE(nonLive.find("Live keys: optim.lr"), std::string::npos) << nonLive;
  // A bad value: the validation's message naming the key; a later valid key does not sneak in.
  const std::string badValue = ask("set optim.lr=fast");
  EXPECT_EQ(badValue.rfind("error: ", 0), 0u) << badValue;
  EXPECT_NE(badValue.find("optim.lr"), std::string::npos) << badValue;
  EXPECT_EQ(ask("set moe.top_k=1 model.num_layers=3").rfind("error: model.num_layers", 0), 0u);
  ASSERT_EQ(ask("stop"), "ok");
  finishRun(false);
  EXPECT_TRUE(configChanges().empty()) << "a refused patch left a config_change row";
}

TEST_F(ControlSocketTest, KeysListsThisRunsLiveKeys) {
  startRun();
  const std::string keys = ask("keys");
  ASSERT_EQ(keys.rfind("ok ", 0), 0u) << keys;
  std::string expected = "ok";
  for (const auto& key : engine::Trainer::liveKeysFor(m_run->config())) expected += " " + key;
  EXPECT_EQ(keys, expected);
  EXPECT_NE(keys.find(" optim.lr "), std::string::npos);
  EXPECT_EQ(keys.find("parallel.ep"), std::string::npos) << "a one-rank run cannot re-shard";
}

TEST_F(ControlSocketTest, JunkIsAnsweredWithErrorsAndTheRunGoesOn) {
  startRun();
  ASSERT_TRUE(waitFor([&] { return stepNow() >= 1; }));
  {
    RawClient client(m_socket);
    ASSERT_TRUE(client.connected());
    // Several requests on one connection, answered in order, one line each.
    ASSERT_TRUE(client.send("status\nbogus\n\n\xff\xfe\x01junk\npause please\r\nkeys\r\n"));
    EXPECT_EQ(client.readLine().value_or("").rfind("ok state=", 0), 0u);
    EXPECT_EQ(client.readLine().value_or("").rfind("error: unknown command 'bogus'", 0), 0u);
    EXPECT_EQ(client.readLine().value_or("").rfind("error: empty request", 0), 0u);
    EXPECT_EQ(client.readLine(), "error: the request is not UTF-8 text");
    EXPECT_EQ(client.readLine().value_or("").rfind("error: pause takes no arguments", 0), 0u);
    EXPECT_EQ(client.readLine().value_or("").rfind("ok optim.lr ", 0), 0u);
  }
  {
    RawClient client(m_socket);  // a line over the cap: an error, then the server hangs up
    ASSERT_TRUE(client.connected());
    client.send(std::string(3 * 4096, 'x'));
    EXPECT_EQ(client.readLine().value_or(""),
              "error: request line longer than 4096 bytes; closing the connection");
    EXPECT_TRUE(client.closedByServer());
  }
  {
    RawClient client(m_socket);  // half a request, then gone: never acted on
    ASSERT_TRUE(client.connected());
    client.send("set optim.lr=0.");
    client.close();
  }
  {
    RawClient client(m_socket);  // half a request, then its side closed: told so
    ASSERT_TRUE(client.connected());
    client.send("pau");
    client.shutdownWrite();
    EXPECT_EQ(client.readLine().value_or("").rfind("error: the connection ended in the middle "
                                                   "of a request line", 0),
              0u);
    EXPECT_TRUE(client.closedByServer());
  }
  const int64_t before = stepNow();
  EXPECT_TRUE(waitFor([&] { return stepNow() >= before + 3; })) << "the run stalled";
  EXPECT_EQ(field(ask("status"), "state"), "running");
  ASSERT_EQ(ask("stop"), "ok");
  finishRun(false);
  EXPECT_TRUE(configChanges().empty());
}

TEST_F(ControlSocketTest, ASilentClientDoesNotStallTheRunOrOtherClients) {
  startRun();
  RawClient silent(m_socket);
  ASSERT_TRUE(silent.connected());
  RawClient partial(m_socket);  // half a line, then nothing
  ASSERT_TRUE(partial.connected());
  ASSERT_TRUE(partial.send("sta"));
  ASSERT_TRUE(waitFor([&] { return stepNow() >= 1; }));
  const int64_t before = stepNow();
  EXPECT_TRUE(waitFor([&] { return stepNow() >= before + 5; })) << "the run stalled";
  EXPECT_EQ(ask("pause"), "ok");
  EXPECT_EQ(field(ask("status"), "state"), "paused");
  EXPECT_EQ(ask("resume"), "ok");
}

TEST_F(ControlSocketTest, AnIdleConnectionIsClosedAfterTheTimeout) {
  startRun(1'000'000, {.idleTimeoutMs = 200});
  RawClient silent(m_socket);
  ASSERT_TRUE(silent.connected());
  EXPECT_EQ(silent.readLine(), "error: no request for 200 ms; closing the connection");
  EXPECT_TRUE(silent.closedByServer());
  EXPECT_EQ(ask("status").rfind("ok ", 0), 0u);
}

TEST_F(ControlSocketTest, StopEndsTheRunStoppedAndTheSocketFileGoes) {
  startRun();
  ASSERT_TRUE(waitFor([&] { return stepNow() >= 2; }));
  EXPECT_EQ(ask("stop"), "ok");
  ASSERT_TRUE(waitFor([&] { return m_runEnded.load(); })) << "stop did not end the run";
  finishRun(false);
  ASSERT_TRUE(m_summary.has_value());
  ASSERT_TRUE(m_summary->isOk()) << m_summary->status().toString();
  EXPECT_TRUE((*m_summary)->stopped);
  EXPECT_LT((*m_summary)->stepsDone, 1'000'000);
  EXPECT_EQ(runStatus(), "stopped");
  EXPECT_FALSE(fs::exists(fs::symlink_status(m_socket))) << "the socket file was left behind";
  Result<std::string> after = askControlSocket(m_socket, "status", kAnswerTimeoutMs);
  EXPECT_EQ(after.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(after.status().message().rfind("no run is listening at " + m_socket, 0), 0u)
      << after.status().message();
}

TEST_F(ControlSocketTest, ARequestStillWaitingWhenTheServerStopsGetsAnError) {
  // A run that is never trained takes no command: the pause waits until the server stops.
  auto server = ControlServer::listen(m_socket);
  ASSERT_TRUE(server.isOk()) << server.status().toString();
  auto config = engine::loadConfigFile(moewb::test::sourceDir() + "/samples/configs/tiny.toml");
  ASSERT_TRUE(config.isOk());
  auto run = TrainingRun::create(*config, {.outPath = m_trace, .steps = 10});
  ASSERT_TRUE(run.isOk()) << run.status().toString();
  ASSERT_TRUE((*server)->start(**run).isOk());
  RawClient client(m_socket);
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.send("status\npause\n"));
  EXPECT_EQ(client.readLine().value_or("").rfind("ok state=running step=0 planned=10", 0), 0u);
  (*server)->stop();
  EXPECT_EQ(client.readLine(), "error: the run ended before the command was handled");
  EXPECT_TRUE(client.closedByServer());
  EXPECT_FALSE(fs::exists(fs::symlink_status(m_socket)));
}

TEST_F(ControlSocketTest, APathTakenByAnotherFileIsRefusedAndLeftAlone) {
  {
    std::ofstream(m_socket) << "precious";
  }
  auto server = ControlServer::listen(m_socket);
  ASSERT_FALSE(server.isOk());
  EXPECT_EQ(server.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(server.status().message().find("exists and is not a socket"), std::string::npos)
      << server.status().message();
  std::ifstream in(m_socket);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
}

TEST_F(ControlSocketTest, AMissingDirectoryOrALongPathIsRefused) {
  auto missing = ControlServer::listen((m_dir / "nope" / "control.sock").string());
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos);
  const std::string longPath = (m_dir / std::string(120, 'a')).string();
  auto tooLong = ControlServer::listen(longPath);
  ASSERT_FALSE(tooLong.isOk());
  EXPECT_EQ(tooLong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tooLong.status().message().find("at most 107 bytes (sun_path)"), std::string::npos)
      << tooLong.status().message();
  EXPECT_FALSE(fs::exists(longPath));
  EXPECT_EQ(ControlServer::listen("").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ControlSocketTest, ALiveSocketIsRefusedAndAStaleOneReplaced) {
  auto first = ControlServer::listen(m_socket);
  ASSERT_TRUE(first.isOk()) << first.status().toString();
  auto second = ControlServer::listen(m_socket);
  ASSERT_FALSE(second.isOk());
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(second.status().message().find("already listens"), std::string::npos);
  EXPECT_TRUE(fs::is_socket(m_socket)) << "the refusal removed the live socket";
  // A socket file nobody listens at (a killed run's): bound, then closed without unlinking.
  const std::string stale = (m_dir / "stale.sock").string();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, stale.data(), stale.size());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ::close(fd);
  ASSERT_TRUE(fs::is_socket(stale));
  auto replaced = ControlServer::listen(stale);
  ASSERT_TRUE(replaced.isOk()) << replaced.status().toString();
  EXPECT_TRUE(fs::is_socket(stale));
  replaced->reset();
  EXPECT_FALSE(fs::exists(fs::symlink_status(stale)));
}

}  // namespace
}  // namespace moewb::run
