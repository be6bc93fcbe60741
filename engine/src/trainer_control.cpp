// Live control of a running Trainer: the command queue (pause, resume, single step, stop) and
// config patches applied at step boundaries (see Trainer::post in trainer.h).
#include <algorithm>
#include <chrono>

#include "backend/device_backend.h"
#include "config_keys.h"
#include "data/synthetic_data.h"
#include "model/model.h"
#include "moewb/base/units.h"
#include "moewb/engine/trainer.h"

namespace moewb::engine {
namespace {

// Changing any other key would need new weights, buffers or a new data layout.
const std::vector<std::string> kLiveKeys = {
    "optim.lr",       "optim.beta1",        "optim.beta2",       "optim.eps",
    "optim.weight_decay", "optim.warmup_steps", "optim.grad_clip", "data.skew",
    "data.noise",      "moe.top_k",          "moe.aux_loss_coef", "moe.seq_aux_loss_coef",
    "moe.z_loss_coef", "moe.route_scale",    "moe.capacity_factor", "moe.drop_policy",
    "fusion.permute_into_experts", "fusion.combine_into_experts", "loss.kind", "loss.chunk_tokens",
    "loss.cce_vocab_block", "loss.cce_filter_eps", "sparse.top_k", "sparse.indexer_loss_coef",
    "kda.chunk_size",
};

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
  RunConfig patched = m_config;
  for (const auto& assignment : command.assignments) {
    MOEWB_RETURN_IF_ERROR(applyOverride(patched, assignment));
    const std::string key = keyOf(assignment);
    if (std::find(kLiveKeys.begin(), kLiveKeys.end(), key) == kLiveKeys.end()) {
      std::string live;
      for (const auto& k : kLiveKeys) live += (live.empty() ? "" : ", ") + k;
      return failedPrecondition(key + " cannot change while the run goes on: it sets the shape of "
                                "weights, buffers or the data layout; start a new run or resume a "
                                "checkpoint with the new config. Live keys: " + live);
    }
  }
  MOEWB_RETURN_IF_ERROR(validateConfig(patched));
  const RunConfig before = m_config;
  const bool dataChanged = !(patched.data == m_config.data);
  m_config = patched;
  m_model->applyLiveDims(ModelDims::fromConfig(m_config));
  if (m_device) m_device->applyLiveDims(ModelDims::fromConfig(m_config));
  if (dataChanged) {
    m_data = std::make_unique<SyntheticData>(m_config.data, m_config.model.vocabSize,
                                             m_config.model.seqLen, m_config.run.seed);
  }
  if (m_sink == nullptr) return Status::ok();
  for (const auto& assignment : command.assignments) {
    const std::string key = keyOf(assignment);
    m_sink->onConfigChange({m_stepsDone, steadyNowNs(), key, valueOf(before, key),
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
        case Kind::kPause: m_paused.store(true); break;
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
