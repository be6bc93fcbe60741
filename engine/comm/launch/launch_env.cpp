// launchEnvFromVariables: the torchrun-style and Slurm environment of a rank (see rendezvous.h).
#include <charconv>
#include <cstdlib>

#include "comm/launch/rendezvous.h"

namespace moewb::engine {
namespace {

using Lookup = std::function<const char*(const char*)>;

const char* kTorchrunNames =
    "a torchrun-style launch sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (LOCAL_RANK and "
    "LOCAL_WORLD_SIZE optional)";

bool isSet(const Lookup& lookup, const char* name) {
  return lookup(name) != nullptr;
}

// The integer value of `name`, which must lie in [lo, hi]; `range` says that range in words.
Result<int64_t> intVariable(const Lookup& lookup, const char* name, int64_t lo, int64_t hi,
                            const std::string& range) {
  const std::string text = lookup(name);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return invalidArgument("environment variable " + std::string(name) + "='" + text +
                           "' is not an integer; accepted: " + range);
  }
  if (value < lo || value > hi) {
    return invalidArgument("environment variable " + std::string(name) + "=" + text +
                           " is out of range; accepted: " + range);
  }
  return value;
}

Result<uint16_t> masterPort(const Lookup& lookup) {
  if (!isSet(lookup, "MASTER_PORT")) return kDefaultMasterPort;
  MOEWB_ASSIGN_OR_RETURN(int64_t port,
                         intVariable(lookup, "MASTER_PORT", 1, 65535, "a TCP port 1..65535"));
  return uint16_t(port);
}

// MASTER_ADDR, required for more than one rank; `hint` says how to set it.
Result<std::string> masterAddr(const Lookup& lookup, int32_t worldSize, const std::string& hint) {
  const char* value = lookup("MASTER_ADDR");
  if (value != nullptr && value[0] != '\0') return std::string(value);
  if (worldSize == 1) return std::string("127.0.0.1");
  return invalidArgument(
      std::string(value == nullptr ? "MASTER_ADDR is not set" : "MASTER_ADDR is empty") +
      "; it must name the host of rank 0 (a host name or IPv4 address). " + hint);
}

std::string rangeText(int64_t hi, const char* limitName) {
  return "an integer in 0.." + std::to_string(hi) + " (below " + limitName + ")";
}

Result<LaunchEnv> torchrunEnv(const Lookup& lookup) {
  for (const char* name : {"RANK", "WORLD_SIZE"}) {
    if (!isSet(lookup, name)) {
      return invalidArgument(std::string(name) + " is not set but " +
                             (std::string(name) == "RANK" ? "WORLD_SIZE" : "RANK") + " is; " +
                             kTorchrunNames);
    }
  }
  if (isSet(lookup, "LOCAL_WORLD_SIZE") && !isSet(lookup, "LOCAL_RANK")) {
    return invalidArgument(std::string("LOCAL_WORLD_SIZE is set but LOCAL_RANK is not; ") +
                           kTorchrunNames);
  }
  LaunchEnv env;
  env.source = "torchrun-style env";
  MOEWB_ASSIGN_OR_RETURN(int64_t worldSize,
                         intVariable(lookup, "WORLD_SIZE", 1, INT32_MAX, "an integer >= 1"));
  env.worldSize = int32_t(worldSize);
  MOEWB_ASSIGN_OR_RETURN(int64_t rank, intVariable(lookup, "RANK", 0, worldSize - 1,
                                                   rangeText(worldSize - 1, "WORLD_SIZE")));
  env.rank = int32_t(rank);
  env.localWorldSize = env.worldSize;
  env.localRank = env.rank;
  if (isSet(lookup, "LOCAL_WORLD_SIZE")) {
    MOEWB_ASSIGN_OR_RETURN(
        int64_t localWorld,
        intVariable(lookup, "LOCAL_WORLD_SIZE", 1, worldSize,
                    "an integer in 1.." + std::to_string(worldSize) + " (at most WORLD_SIZE)"));
    env.localWorldSize = int32_t(localWorld);
  }
  if (isSet(lookup, "LOCAL_RANK")) {
    MOEWB_ASSIGN_OR_RETURN(int64_t localRank,
                           intVariable(lookup, "LOCAL_RANK", 0, env.localWorldSize - 1,
                                       rangeText(env.localWorldSize - 1, "LOCAL_WORLD_SIZE")));
    env.localRank = int32_t(localRank);
  }
  MOEWB_ASSIGN_OR_RETURN(env.masterAddr,
                         masterAddr(lookup, env.worldSize, "torchrun and moewb launch set it."));
  MOEWB_ASSIGN_OR_RETURN(env.masterPort, masterPort(lookup));
  return env;
}

// The number of tasks on node `node` from SLURM_TASKS_PER_NODE ("2(x3),1": nodes 0-2 run 2 tasks,
// node 3 runs 1).
Result<int64_t> tasksOnNode(const std::string& text, int64_t node) {
  const std::string accepted =
      "; accepted: comma-separated entries N or N(xM), as Slurm writes them, e.g. '4(x2),3'";
  int64_t firstNode = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string entry = text.substr(pos, comma - pos);
    int64_t tasks = 0, repeat = 1;
    const char* begin = entry.data();
    const char* end = begin + entry.size();
    auto [afterTasks, ec] = std::from_chars(begin, end, tasks);
    bool ok = ec == std::errc() && tasks >= 1;
    if (ok && afterTasks != end) {
      const std::string rest(afterTasks, end);
      ok = rest.size() > 3 && rest.starts_with("(x") && rest.back() == ')';
      if (ok) {
        auto [afterRepeat, ec2] =
            std::from_chars(rest.data() + 2, rest.data() + rest.size() - 1, repeat);
        ok = ec2 == std::errc() && afterRepeat == rest.data() + rest.size() - 1 && repeat >= 1;
      }
    }
    if (!ok) {
      return invalidArgument("environment variable SLURM_TASKS_PER_NODE='" + text +
                             "' has an entry '" + entry + "' that is not understood" + accepted);
    }
    if (node < firstNode + repeat) return tasks;
    firstNode += repeat;
    pos = comma + 1;
  }
  return invalidArgument("environment variable SLURM_TASKS_PER_NODE='" + text + "' lists " +
                         std::to_string(firstNode) + " nodes but SLURM_NODEID is " +
                         std::to_string(node));
}

Result<int32_t> slurmLocalWorldSize(const Lookup& lookup, int64_t worldSize) {
  const std::string range =
      "an integer in 1.." + std::to_string(worldSize) + " (at most SLURM_NTASKS)";
  if (isSet(lookup, "SLURM_NTASKS_PER_NODE")) {
    MOEWB_ASSIGN_OR_RETURN(int64_t n,
                           intVariable(lookup, "SLURM_NTASKS_PER_NODE", 1, worldSize, range));
    return int32_t(n);
  }
  if (!isSet(lookup, "SLURM_TASKS_PER_NODE")) {
    return invalidArgument(
        "neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set; start the ranks with srun "
        "(which sets them) or export SLURM_NTASKS_PER_NODE");
  }
  int64_t node = 0;
  if (isSet(lookup, "SLURM_NODEID")) {
    MOEWB_ASSIGN_OR_RETURN(node,
                           intVariable(lookup, "SLURM_NODEID", 0, INT32_MAX, "an integer >= 0"));
  }
  MOEWB_ASSIGN_OR_RETURN(int64_t tasks, tasksOnNode(lookup("SLURM_TASKS_PER_NODE"), node));
  if (tasks > worldSize) {
    return invalidArgument(
        "SLURM_TASKS_PER_NODE gives " + std::to_string(tasks) +
        " tasks on this node, more than SLURM_NTASKS=" + std::to_string(worldSize));
  }
  return int32_t(tasks);
}

Result<LaunchEnv> slurmEnv(const Lookup& lookup) {
  for (const char* name : {"SLURM_NTASKS", "SLURM_LOCALID"}) {
    if (!isSet(lookup, name)) {
      return invalidArgument(std::string("SLURM_PROCID is set but ") + name +
                             " is not; start one task per rank with srun (which sets SLURM_PROCID, "
                             "SLURM_NTASKS, SLURM_LOCALID and SLURM_TASKS_PER_NODE)");
    }
  }
  LaunchEnv env;
  env.source = "slurm";
  MOEWB_ASSIGN_OR_RETURN(int64_t worldSize,
                         intVariable(lookup, "SLURM_NTASKS", 1, INT32_MAX, "an integer >= 1"));
  env.worldSize = int32_t(worldSize);
  MOEWB_ASSIGN_OR_RETURN(int64_t rank, intVariable(lookup, "SLURM_PROCID", 0, worldSize - 1,
                                                   rangeText(worldSize - 1, "SLURM_NTASKS")));
  env.rank = int32_t(rank);
  MOEWB_ASSIGN_OR_RETURN(env.localWorldSize, slurmLocalWorldSize(lookup, worldSize));
  MOEWB_ASSIGN_OR_RETURN(int64_t localRank,
                         intVariable(lookup, "SLURM_LOCALID", 0, env.localWorldSize - 1,
                                     rangeText(env.localWorldSize - 1, "the tasks on this node")));
  env.localRank = int32_t(localRank);
  MOEWB_ASSIGN_OR_RETURN(
      env.masterAddr,
      masterAddr(lookup, env.worldSize,
                 "Under Slurm export it in the batch script, e.g. export MASTER_ADDR=$(scontrol "
                 "show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)"));
  MOEWB_ASSIGN_OR_RETURN(env.masterPort, masterPort(lookup));
  return env;
}

}  // namespace

Result<std::optional<LaunchEnv>> launchEnvFromVariables(const Lookup& lookup) {
  if (isSet(lookup, "RANK") || isSet(lookup, "WORLD_SIZE")) {
    MOEWB_ASSIGN_OR_RETURN(LaunchEnv env, torchrunEnv(lookup));
    return std::optional<LaunchEnv>(std::move(env));
  }
  for (const char* name : {"LOCAL_RANK", "LOCAL_WORLD_SIZE"}) {
    if (isSet(lookup, name)) {
      return invalidArgument(std::string(name) + " is set but RANK and WORLD_SIZE are not; " +
                             kTorchrunNames);
    }
  }
  if (isSet(lookup, "SLURM_PROCID")) {
    MOEWB_ASSIGN_OR_RETURN(LaunchEnv env, slurmEnv(lookup));
    return std::optional<LaunchEnv>(std::move(env));
  }
  return std::optional<LaunchEnv>();
}

Result<std::optional<LaunchEnv>> launchEnvFromEnvironment() {
  return launchEnvFromVariables([](const char* name) { return std::getenv(name); });
}

}  // namespace moewb::engine
