// Live control of a running Trainer: the command queue (pause, resume, single step, stop) and
// config patches applied at step boundaries (see Trainer::post in trainer.h).
#include <algorithm>
#include <chrono>

#include "config/config_keys.h"
#include "moewb/base/text.h"
#include "moewb/base/units.h"
#include "moewb/engine/trainer.h"
#include "train/step_runner.h"

namespace moewb::engine {
namespace {

// Changing any other key would need new weights, buffers or a new data layout.
const std::vector<std::string> kLiveKeys = {
    "optim.lr",       "optim.beta1",        "optim.beta2",       "optim.eps",
    "optim.weight_decay", "optim.warmup_steps", "optim.grad_clip", "data.skew",
    "data.noise",      "data.micro_batch_size", "moe.top_k", "moe.aux_loss_coef",
    "moe.seq_aux_loss_coef",
    "moe.z_loss_coef", "moe.route_scale",    "moe.capacity_factor", "moe.drop_policy",
    "fusion.permute_into_experts", "fusion.combine_into_experts", "loss.kind", "loss.chunk_tokens",
    "loss.cce_vocab_block", "loss.cce_filter_eps", "loss.cce_filter_weight_grad", "sparse.top_k",
    "kernels.expert_glu", "kernels.expert_wgrad_walk",
    "sparse.indexer_loss_coef",
    "kda.chunk_size", "swap.mode", "swap.ops", "swap.recompute_ops", "swap.min_bytes",
    "swap.hbm_target_gb", "swap.prefetch_layers", "swap.free_lag_layers",
};

// The parallel layout within the same ranks: live on in-process rank groups, which re-shard
// their state into the new layout at the step boundary (parallel/rank_group_runner.h).
const std::vector<std::string> kLayoutKeys = {
    "parallel.ep", "parallel.fsdp", "parallel.replicate", "parallel.a2a_chunks",
};

bool isLayoutKey(const std::string& key) {
  return std::find(kLayoutKeys.begin(), kLayoutKeys.end(), key) != kLayoutKeys.end();
}

// "key=value" -> key (the text before the first '=').
std::string keyOf(const std::string& assignment) {
  return assignment.substr(0, assignment.find('='));
}

// The value of `key` in `config` as TOML text.
std::string valueOf(const RunConfig& config, const std::string& key) {
  const detail::KeySpec* spec = detail::findKey(key);
  return spec ? detail::fieldToToml(*spec, config) : "";
}

}  // namespace

const std::vector<std::string>& Trainer::liveKeys() { return kLiveKeys; }
const std::vector<std::string>& Trainer::layoutKeys() { return kLayoutKeys; }

std::vector<std::string> Trainer::liveKeysFor(const RunConfig& config) {
  std::vector<std::string> keys = kLiveKeys;
  if (config.parallel.worldSize > 1) {
    keys.insert(keys.end(), kLayoutKeys.begin(), kLayoutKeys.end());
  }
  return keys;
}

std::future<Status> Trainer::post(TrainerCommand command) {
  QueuedCommand queued{std::move(command), {}};
  std::future<Status> done = queued.done.get_future();
  {
    std::lock_guard<std::mutex> lock(m_commandMutex);
    m_commands.push_back(std::move(queued));
  }
  m_commandReady.notify_all();
  return done;
}

Status Trainer::applyPatch(const TrainerCommand& command) {
  if (!m_liveRefusal.empty()) {
    for (const auto& assignment : command.assignments) {
      const std::string key = keyOf(assignment);
      if (!isLayoutKey(key)) continue;
      return failedPrecondition(key + " cannot change on a multi-process run: re-sharding the "
                                "parallel layout live needs in-process ranks (moewb run --ranks "
                                "N); stop the run and start it with the new layout");
    }
    return failedPrecondition(m_liveRefusal);
  }
  const bool reshards = m_runner->reshardsLive();
  RunConfig patched = m_config;
  for (const auto& assignment : command.assignments) {
    MOEWB_RETURN_IF_ERROR(applyOverride(patched, assignment));
    const std::string key = keyOf(assignment);
    const bool live = std::find(kLiveKeys.begin(), kLiveKeys.end(), key) != kLiveKeys.end();
    if (!live && !(reshards && isLayoutKey(key))) {
      const std::string keys =
          joinText(kLiveKeys, ", ") + (reshards ? ", " + joinText(kLayoutKeys, ", ") : "");
      return failedPrecondition(key + " cannot change while the run goes on: it sets the shape of "
                                "weights, buffers or the data layout; start a new run or resume a "
                                "checkpoint with the new config. Live keys: " + keys);
    }
  }
  MOEWB_ASSIGN_OR_RETURN(const ValidConfig valid, ValidConfig::validate(patched));
  // Every rank takes the patch at this step boundary (the runner applies it to each rank's model,
  // device copy and data source, or re-shards the group into a new layout) before the config of
  // record changes.
  MOEWB_RETURN_IF_ERROR(m_runner->applyLiveConfig(valid));
  const RunConfig before = m_config;
  m_config = patched;
  EventSink* sink = m_sinks.empty() ? nullptr : m_sinks[0];
  if (sink == nullptr) return Status::ok();
  for (const auto& assignment : command.assignments) {
    const std::string key = keyOf(assignment);
    sink->onConfigChange({m_stepsDone.load(), steadyNowNs(), key, valueOf(before, key),
                          valueOf(m_config, key), command.source});
  }
  return Status::ok();
}

void Trainer::rejectPendingCommands() {
  std::lock_guard<std::mutex> lock(m_commandMutex);
  for (auto& queued : m_commands) {
    queued.done.set_value(failedPrecondition("the run ended before the command was handled"));
  }
  m_commands.clear();
}

bool Trainer::handleCommands() {
  using Kind = TrainerCommand::Kind;
  std::unique_lock<std::mutex> lock(m_commandMutex);
  if (m_singleStep) {  // the single step just ran: pause again
    m_singleStep = false;
    m_paused.store(true);
  }
  for (;;) {
    while (!m_commands.empty()) {
      QueuedCommand queued = std::move(m_commands.front());
      m_commands.pop_front();
      Status status = Status::ok();
      switch (queued.command.kind) {
        case Kind::kPause:
          if (!m_liveRefusal.empty()) {
            status = failedPrecondition(m_liveRefusal);
          } else {
            m_paused.store(true);
          }
          break;
        case Kind::kResume: m_paused.store(false); break;
        case Kind::kStep:
          if (m_paused.load()) m_singleStep = true;
          break;
        case Kind::kStop: m_stopRequested.store(true); break;
        case Kind::kApplyPatch: status = applyPatch(queued.command); break;
      }
      queued.done.set_value(status);
    }
    if (m_stopRequested.load()) return false;
    if (!m_paused.load() || m_singleStep) {
      if (m_singleStep) m_paused.store(false);
      return true;
    }
    // Paused: wait for a command; wake up now and then to see a requestStop() from a signal.
    m_commandReady.wait_for(lock, std::chrono::milliseconds(50));
  }
}

}  // namespace moewb::engine
