// Trainer: the step on a device backend (the CUDA backend). The data, the events and the
// divergence rules are the CPU step's; the model's arithmetic runs on the device.
#include <cmath>

#include "backend/device_backend.h"
#include "checkpoint/alignment_dump.h"
#include "data/synthetic_data.h"
#include "moewb/base/units.h"
#include "moewb/engine/trainer.h"

namespace moewb::engine {

Result<StepEvent> Trainer::deviceTrainStep(int64_t stepIndex, StepEvent event,
                                           PhaseRecorder& recorder, const Batch& batch) {
  const bool dumping = stepIndex >= m_dumpFirstStep && stepIndex < m_dumpEndStep;
  if (dumping) MOEWB_RETURN_IF_ERROR(m_device->pullState(*m_model));
  MOEWB_ASSIGN_OR_RETURN(DeviceStepResult result,
                         m_device->trainStep(batch, stepIndex, m_config.optim, &recorder));
  const ForwardResult& forward = result.forward;
  if (!std::isfinite(forward.loss) || !std::isfinite(forward.auxLoss)) {
    return internalError("training diverged at step " + std::to_string(stepIndex) +
                         ": loss = " + std::to_string(forward.loss) +
                         ", aux loss = " + std::to_string(forward.auxLoss));
  }
  if (!std::isfinite(result.optim.gradNorm)) {
    return internalError("training diverged at step " + std::to_string(stepIndex) +
                         ": gradient norm = " + std::to_string(result.optim.gradNorm));
  }
  if (dumping) {
    MOEWB_RETURN_IF_ERROR(m_device->pullGrads(*m_model));
    MOEWB_RETURN_IF_ERROR(writeAlignmentDump(m_dumpDir, stepIndex, m_model->parameters(), batch,
                                             {forward.loss, forward.auxLoss}, toToml(m_config)));
  }
  m_model->afterOptimizerStep();  // the expert bias lives on the host model
  event.endNs = steadyNowNs();
  event.loss = forward.loss;
  event.auxLoss = forward.auxLoss;
  event.tokens = batch.tokens();
  const double seconds = double(std::max<int64_t>(1, event.endNs - event.startNs)) / kNsPerSecond;
  event.tokensPerSecond = double(event.tokens) / seconds;
  event.peakBytes = result.peakBytes;
  event.gradNorm = result.optim.gradNorm;
  event.lr = result.optim.lr;
  MemoryAccount memory;
  memory.weightsBytes = result.weightsBytes;
  memory.gradsBytes = result.gradsBytes;
  memory.optimizerBytes = result.optimizerBytes;
  memory.activationsBytes = result.activationsPeakBytes;
  memory.totalBytes = result.peakBytes;
  emitStepEvents(event, forward, memory);
  ++m_stepsDone;
  return event;
}

}  // namespace moewb::engine
