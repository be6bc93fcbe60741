// launchEnvFromEnvironment: torchrun-style and Slurm variables (set with setenv, restored after
// each test), their defaults, and one error per kind of bad value naming the variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "comm/launch/rendezvous.h"

namespace moewb::engine {
namespace {

const char* const kNames[] = {"RANK",
                              "WORLD_SIZE",
                              "LOCAL_RANK",
                              "LOCAL_WORLD_SIZE",
                              "MASTER_ADDR",
                              "MASTER_PORT",
                              "SLURM_PROCID",
                              "SLURM_NTASKS",
                              "SLURM_LOCALID",
                              "SLURM_NTASKS_PER_NODE",
                              "SLURM_TASKS_PER_NODE",
                              "SLURM_NODEID"};

// Clears every launch variable for the test and restores the old values afterwards.
class LaunchEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kNames) {
      if (const char* value = std::getenv(name)) m_saved[name] = value;
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kNames) ::unsetenv(name);
    for (const auto& [name, value] : m_saved) ::setenv(name.c_str(), value.c_str(), 1);
  }
  static void set(std::initializer_list<std::pair<const char*, const char*>> values) {
    for (const auto& [name, value] : values) ::setenv(name, value, 1);
  }
  // The error message of a parse that must fail with kInvalidArgument.
  static std::string errorOf() {
    auto env = launchEnvFromEnvironment();
    EXPECT_FALSE(env.isOk());
    if (env.isOk()) return "";
    EXPECT_EQ(env.status().code(), StatusCode::kInvalidArgument);
    return env.status().message();
  }

 private:
  std::map<std::string, std::string> m_saved;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_F(LaunchEnvTest, NothingSetIsASingleProcessRun) {
  auto env = launchEnvFromEnvironment();
  ASSERT_TRUE(env.isOk()) << env.status().toString();
  EXPECT_FALSE(env->has_value());
  set({{"MASTER_ADDR", "node1"}, {"SLURM_NTASKS", "4"}});  // no rank variable: still single
  env = launchEnvFromEnvironment();
  ASSERT_TRUE(env.isOk()) << env.status().toString();
  EXPECT_FALSE(env->has_value());
}

TEST_F(LaunchEnvTest, ReadsTorchrunVariables) {
  set({{"RANK", "5"},
       {"WORLD_SIZE", "8"},
       {"LOCAL_RANK", "1"},
       {"LOCAL_WORLD_SIZE", "4"},
       {"MASTER_ADDR", "10.0.0.7"},
       {"MASTER_PORT", "29511"},
       {"SLURM_PROCID", "0"}});  // torchrun inside srun: the torchrun names win
  auto env = launchEnvFromEnvironment();
  ASSERT_TRUE(env.isOk()) << env.status().toString();
  ASSERT_TRUE(env->has_value());
  const LaunchEnv& e = **env;
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.worldSize, 8);
  EXPECT_EQ(e.localRank, 1);
  EXPECT_EQ(e.localWorldSize, 4);
  EXPECT_EQ(e.masterAddr, "10.0.0.7");
  EXPECT_EQ(e.masterPort, 29511);
  EXPECT_EQ(e.source, "torchrun-style env");
}

TEST_F(LaunchEnvTest, TorchrunDefaults) {
  set({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "localhost"}});
  auto env = launchEnvFromEnvironment();
  ASSERT_TRUE(env.isOk()) << env.status().toString();
  EXPECT_EQ((*env)->localRank, 1);  // all ranks on one host
  EXPECT_EQ((*env)->localWorldSize, 2);
  EXPECT_EQ((*env)->masterPort, kDefaultMasterPort);
  ::unsetenv("MASTER_ADDR");
  set({{"RANK", "0"}, {"WORLD_SIZE", "1"}});  // one rank needs no address
  env = launchEnvFromEnvironment();
  ASSERT_TRUE(env.isOk()) << env.status().toString();
  EXPECT_EQ((*env)->masterAddr, "127.0.0.1");
}

TEST_F(LaunchEnvTest, TorchrunErrorsNameTheVariable) {
  set({{"RANK", "0"}});
  EXPECT_TRUE(contains(errorOf(), "WORLD_SIZE is not set but RANK is"));
  set({{"WORLD_SIZE", "two"}});
  std::string message = errorOf();
  EXPECT_TRUE(contains(message, "WORLD_SIZE='two' is not an integer; accepted: an integer >= 1"))
      << message;
  set({{"WORLD_SIZE", "0"}});
  EXPECT_TRUE(contains(errorOf(), "WORLD_SIZE=0 is out of range"));
  set({{"WORLD_SIZE", "4"}, {"RANK", "4"}});
  message = errorOf();
  EXPECT_TRUE(contains(message,
                       "RANK=4 is out of range; accepted: an integer in 0..3 (below "
                       "WORLD_SIZE)"))
      << message;
  set({{"RANK", "3 "}});
  EXPECT_TRUE(contains(errorOf(), "RANK='3 ' is not an integer"));
  set({{"RANK", "3"}});
  message = errorOf();
  EXPECT_TRUE(contains(message, "MASTER_ADDR is not set; it must name the host of rank 0"))
      << message;
  set({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}});
  message = errorOf();
  EXPECT_TRUE(contains(message, "MASTER_PORT=70000 is out of range; accepted: a TCP port 1..65535"))
      << message;
  set({{"MASTER_PORT", "29500"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_TRUE(contains(errorOf(), "LOCAL_WORLD_SIZE is set but LOCAL_RANK is not"));
  set({{"LOCAL_RANK", "2"}});
  EXPECT_TRUE(contains(errorOf(), "LOCAL_RANK=2 is out of range"));
  set({{"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "5"}});
  EXPECT_TRUE(contains(errorOf(),
                       "LOCAL_WORLD_SIZE=5 is out of range; accepted: an integer in "
                       "1..4 (at most WORLD_SIZE)"));
  set({{"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_TRUE(launchEnvFromEnvironment().isOk());
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  EXPECT_TRUE(contains(errorOf(), "LOCAL_RANK is set but RANK and WORLD_SIZE are not"));
}

TEST_F(LaunchEnvTest, ReadsSlurmVariables) {
  set({{"SLURM_PROCID", "6"},
       {"SLURM_NTASKS", "8"},
       {"SLURM_LOCALID", "2"},
       {"SLURM_NTASKS_PER_NODE", "4"},
       {"MASTER_ADDR", "gpu-node-01"}});
  auto env = launchEnvFromEnvironment();
  ASSERT_TRUE(env.isOk()) << env.status().toString();
  ASSERT_TRUE(env->has_value());
  EXPECT_EQ((*env)->rank, 6);
  EXPECT_EQ((*env)->worldSize, 8);
  EXPECT_EQ((*env)->localRank, 2);
  EXPECT_EQ((*env)->localWorldSize, 4);
  EXPECT_EQ((*env)->masterAddr, "gpu-node-01");
  EXPECT_EQ((*env)->masterPort, kDefaultMasterPort);
  EXPECT_EQ((*env)->source, "slurm");
  // Without SLURM_NTASKS_PER_NODE: this node's entry of SLURM_TASKS_PER_NODE.
  ::unsetenv("SLURM_NTASKS_PER_NODE");
  set({{"SLURM_NTASKS", "7"},
       {"SLURM_TASKS_PER_NODE", "2(x2),3"},
       {"SLURM_NODEID", "2"},
       {"MASTER_PORT", "31000"}});
  env = launchEnvFromEnvironment();
  ASSERT_TRUE(env.isOk()) << env.status().toString();
  EXPECT_EQ((*env)->localWorldSize, 3);
  EXPECT_EQ((*env)->masterPort, 31000);
}

TEST_F(LaunchEnvTest, SlurmErrorsNameTheVariable) {
  set({{"SLURM_PROCID", "1"}});
  EXPECT_TRUE(contains(errorOf(), "SLURM_PROCID is set but SLURM_NTASKS is not"));
  set({{"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}});
  EXPECT_TRUE(contains(errorOf(), "neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE"));
  set({{"SLURM_TASKS_PER_NODE", "2(x"}});
  EXPECT_TRUE(contains(errorOf(), "SLURM_TASKS_PER_NODE='2(x' has an entry '2(x' that is not"));
  set({{"SLURM_TASKS_PER_NODE", "2"}});
  std::string message = errorOf();
  EXPECT_TRUE(contains(message, "MASTER_ADDR is not set")) << message;
  EXPECT_TRUE(contains(message, "scontrol show hostnames")) << message;
  set({{"MASTER_ADDR", "n1"}, {"SLURM_PROCID", "2"}});
  EXPECT_TRUE(contains(errorOf(), "SLURM_PROCID=2 is out of range; accepted: an integer in 0..1"));
  set({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS_PER_NODE", "1"}});
  EXPECT_TRUE(contains(errorOf(), "SLURM_LOCALID=1 is out of range"));
  set({{"SLURM_LOCALID", "0"}});
  EXPECT_TRUE(launchEnvFromEnvironment().isOk());
}

}  // namespace
}  // namespace moewb::engine
