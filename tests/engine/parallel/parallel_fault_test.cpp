// Faults on in-process ranks: a rank that fails (throws) or stalls makes the other ranks' step
// fail within the collective timeout, with an error naming that rank.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "comm/in_process_comm.h"
#include "train/parallel/cpu_rank_stepper.h"

namespace moewb::engine {
namespace {

using Clock = std::chrono::steady_clock;

RunConfig faultConfig() {
  RunConfig c;
  c.run.threads = 1;
  c.model.vocabSize = 32;
  c.model.dModel = 16;
  c.model.numHeads = 2;
  c.model.seqLen = 8;
  c.model.mixerPattern = "A";
  c.moe.numExperts = 4;
  c.moe.dFf = 8;
  c.data.batchSize = 4;
  c.parallel.worldSize = 2;
  c.parallel.ep = 2;
  return c;
}

TEST(ParallelFault, ThrowingRankIsNamedByThePeers) {
  std::mutex mutex;
  std::string peerError;
  const Status status = runRanks(2, [&](Communicator& comm) -> Status {
    MOEWB_ASSIGN_OR_RETURN(auto trainer, CpuRankStepper::create(*ValidConfig::validate(faultConfig()), comm, nullptr));
    MOEWB_RETURN_IF_ERROR(trainer->step().status());
    if (comm.rank() == 1) throw std::runtime_error("simulated crash");
    Result<RankStepOutcome> step = trainer->step();
    std::lock_guard<std::mutex> lock(mutex);
    peerError = step.status().toString();
    return step.status();
  }, std::chrono::milliseconds(5000));
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.toString().find("rank 1"), std::string::npos) << status.toString();
  EXPECT_NE(peerError.find("rank 1"), std::string::npos) << peerError;
}

TEST(ParallelFault, StalledRankTimesOutNamingIt) {
  const auto timeout = std::chrono::milliseconds(300);
  std::mutex mutex;
  std::string peerError;
  double peerSeconds = 0;
  const Status status = runRanks(2, [&](Communicator& comm) -> Status {
    MOEWB_ASSIGN_OR_RETURN(auto trainer, CpuRankStepper::create(*ValidConfig::validate(faultConfig()), comm, nullptr));
    MOEWB_RETURN_IF_ERROR(trainer->step().status());
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // hangs past the timeout
      return trainer->step().status();
    }
    const auto start = Clock::now();
    Result<RankStepOutcome> step = trainer->step();
    std::lock_guard<std::mutex> lock(mutex);
    peerSeconds = std::chrono::duration<double>(Clock::now() - start).count();
    peerError = step.status().toString();
    return step.status();
  }, timeout);
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(peerError.find("rank 1"), std::string::npos) << peerError;
  EXPECT_LT(peerSeconds, 1.2) << "the peer waited for the stalled rank instead of timing out";
}

}  // namespace
}  // namespace moewb::engine
