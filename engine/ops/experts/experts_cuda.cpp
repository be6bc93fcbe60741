// Host side of the grouped GPU experts: shape checks and allocation (see experts_cuda.h); the
// kernels are in experts_cuda.cu.
#include "ops/experts/experts_cuda.h"

#include <atomic>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "ops/experts/experts_cuda_kernels.h"
#include "ops/experts/experts_wgmma_cuda.h"

namespace moewb::engine::cuda {
namespace {

std::atomic<int> gWgmmaMode{int(ExpertsWgmmaMode::kEnvironment)};
// MOEWB_GROUPED_WS=0 turns the warp-specialized kernels off for the process (A/B benchmarks);
// unset or any other value keeps the default.
bool warpSpecializedFromEnvironment() {
  const char* text = std::getenv("MOEWB_GROUPED_WS");
  if (text != nullptr && std::string(text) == "0") return false;
  return kExpertsWarpSpecializedDefault;
}

std::atomic<bool> gWarpSpecialized{warpSpecializedFromEnvironment()};

// MOEWB_GROUPED_WS_GLU=1 turns the ping-pong gate+up / dh kernels on for the process; unset or
// any other value keeps the default (kExpertsGluPingPongDefault).
bool gluPingPongFromEnvironment() {
  const char* text = std::getenv("MOEWB_GROUPED_WS_GLU");
  if (text != nullptr && std::string(text) == "1") return true;
  return kExpertsGluPingPongDefault;
}

std::atomic<bool> gGluPingPong{gluPingPongFromEnvironment()};

// MOEWB_GROUPED_WS_WGRAD=1 turns round 6's weight-gradient kernel on for the process; unset or any
// other value keeps the default (kExpertsWsWgradDefault).
bool wsWgradFromEnvironment() {
  const char* text = std::getenv("MOEWB_GROUPED_WS_WGRAD");
  if (text != nullptr && std::string(text) == "1") return true;
  return kExpertsWsWgradDefault;
}

std::atomic<bool> gWsWgrad{wsWgradFromEnvironment()};

// MOEWB_GROUPED_WGMMA, read once: `on` 3 all wgmma stages ("1" or unset), 2 fc + dgrad
// ("dgrad"), 1 the fc stages only ("fc"), 0 none ("0"), -1 any other value (`text`).
struct WgmmaEnvironment {
  int on = 3;
  std::string text;
};

const WgmmaEnvironment& wgmmaEnvironment() {
  static const WgmmaEnvironment value = [] {
    WgmmaEnvironment env;
    const char* v = std::getenv("MOEWB_GROUPED_WGMMA");
    if (v == nullptr) return env;
    env.text = v;
    const char* names[] = {"0", "fc", "dgrad", "1"};
    env.on = -1;
    for (int i = 0; i < 4; ++i) {
      if (env.text == names[i]) env.on = i;
    }
    return env;
  }();
  return value;
}

// Per device ordinal: 0 not yet asked, 1 unsupported, 2 supported.
constexpr int kMaxDevices = 64;
std::atomic<int> gWgmmaSupport[kMaxDevices];

bool askWgmmaSupport([[maybe_unused]] int device) {
#if MOEWB_EXPERTS_WGMMA
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0 && expertsWgmmaLoadable();
#else
  return false;
#endif
}

Result<ExpertsLaunchShape> checkShapes(const char* op, const DeviceTensor<bf16>& x,
                                       const DeviceTensor<int32_t>& offsets,
                                       const DeviceExpertWeights& weights,
                                       const DeviceExpertsIo& io) {
  ExpertsLaunchShape shape;
  shape.experts = offsets.numel() - 1;
  const std::string where = std::string(op) + ": ";
  if (shape.experts < 1 || weights.gate.rank() != 3 || weights.gate.dim(0) != shape.experts ||
      x.rank() != 2) {
    return invalidArgument(where + "offsets " + offsets.shapeString() + ", gate " +
                           weights.gate.shapeString() + ", x " + x.shapeString());
  }
  if (shape.experts > 65535) {
    return invalidArgument(where + "E = " + std::to_string(shape.experts) +
                           " exceeds one grid dimension (65535)");
  }
  shape.f = weights.gate.dim(1);
  shape.d = weights.gate.dim(2);
  const std::vector<int64_t> gateShape{shape.experts, shape.f, shape.d};
  const std::vector<int64_t> downShape{shape.experts, shape.d, shape.f};
  if (weights.up.shape() != gateShape || weights.down.shape() != downShape || x.dim(1) != shape.d) {
    return invalidArgument(where + "gate " + weights.gate.shapeString() + ", up " +
                           weights.up.shapeString() + ", down " + weights.down.shapeString() +
                           ", x " + x.shapeString());
  }
  shape.maxRows = io.gatherIndex != nullptr ? io.gatherIndex->numel() : x.dim(0);
  if (io.rowWeight != nullptr &&
      (io.rowWeight->numel() < shape.maxRows || io.outputIndex == nullptr ||
       io.outputIndex->numel() < shape.maxRows)) {
    return invalidArgument(where + "rowWeight needs rowWeight and outputIndex of " +
                           std::to_string(shape.maxRows) + " rows");
  }
  return Result<ExpertsLaunchShape>(shape);
}

}  // namespace

void setExpertsWgmmaMode(ExpertsWgmmaMode mode) {
  gWgmmaMode.store(int(mode));
}

void setExpertsWarpSpecialized(bool on) {
  gWarpSpecialized.store(on);
}

bool expertsWarpSpecialized() {
  return gWarpSpecialized.load();
}

void setExpertsGluPingPong(bool on) {
  gGluPingPong.store(on);
}

bool expertsGluPingPong() {
  return gGluPingPong.load();
}

void setExpertsWsWgrad(bool on) {
  gWsWgrad.store(on);
}

bool expertsWsWgrad() {
  return gWsWgrad.load();
}

bool expertsWgmmaSupported() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (device < 0 || device >= kMaxDevices) return askWgmmaSupport(device);
  int known = gWgmmaSupport[device].load();
  if (known == 0) {
    known = askWgmmaSupport(device) ? 2 : 1;
    gWgmmaSupport[device].store(known);
  }
  return known == 2;
}

Status expertsWgmmaStages(WgmmaStages& stages) {
  stages = WgmmaStages{};
  const auto mode = ExpertsWgmmaMode(gWgmmaMode.load());
  int on = mode == ExpertsWgmmaMode::kOn ? 3 : 0;
  if (mode == ExpertsWgmmaMode::kEnvironment) {
    const WgmmaEnvironment& env = wgmmaEnvironment();
    if (env.on < 0) {
      return invalidArgument("MOEWB_GROUPED_WGMMA=" + env.text +
                             ": accepted values are 0 (grouped expert GEMMs on mma.sync only), "
                             "fc (wgmma for the forward and dRowWeight GEMMs), dgrad (those and "
                             "dh / dx) and 1 (all of them and the weight gradients: the default "
                             "on compute capability 9.0)");
    }
    on = env.on;
  }
  if (on == 0 || !expertsWgmmaSupported()) return Status::ok();
  stages.fc = true;
  stages.dgrad = on >= 2;
  stages.wgrad = on >= 3;
  return Status::ok();
}

Result<DeviceTensor<bf16>> expertsForwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                                              const DeviceTensor<int32_t>& offsets,
                                              const DeviceExpertWeights& weights,
                                              DeviceExpertsSaved& saved,
                                              const GluParams& activation,
                                              const DeviceExpertsIo& io) {
  MOEWB_ASSIGN_OR_RETURN(ExpertsLaunchShape shape,
                         checkShapes("expertsForwardCuda", x, offsets, weights, io));
  const int64_t rows = shape.maxRows, d = shape.d, f = shape.f;
  const MemoryCategory kept = MemoryCategory::kActivations;
  MOEWB_ASSIGN_OR_RETURN(saved.gatePre, context.newTensor<bf16>({rows, f}, kept));
  MOEWB_ASSIGN_OR_RETURN(saved.upPre, context.newTensor<bf16>({rows, f}, kept));
  MOEWB_ASSIGN_OR_RETURN(saved.hidden, context.newTensor<bf16>({rows, f}, kept));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> y, context.newTensor<bf16>({rows, d}, kept));
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<int32_t> tileStart,
      context.newTensor<int32_t>({shape.experts + 1}, MemoryCategory::kWorkspace));
  ExpertsForwardArgs args;
  args.x = x.data();
  args.gatherIndex = io.gatherIndex != nullptr ? io.gatherIndex->data() : nullptr;
  args.offsets = offsets.data();
  args.gate = weights.gate.data();
  args.up = weights.up.data();
  args.down = weights.down.data();
  args.rowWeight = io.rowWeight != nullptr ? io.rowWeight->data() : nullptr;
  args.tileStart = tileStart.data();
  args.gatePre = saved.gatePre.data();
  args.upPre = saved.upPre.data();
  args.hidden = saved.hidden.data();
  args.y = y.data();
  MOEWB_RETURN_IF_ERROR(expertsForwardLaunch(context.stream(), shape, args, activation));
  return Result<DeviceTensor<bf16>>(std::move(y));
}

Result<DeviceTensor<bf16>> expertsBackwardCuda(
    CudaContext& context, const DeviceTensor<bf16>& dY, const DeviceTensor<bf16>& x,
    const DeviceTensor<int32_t>& offsets, const DeviceExpertWeights& weights,
    const DeviceExpertsSaved& saved, const DeviceExpertGrads& grads, const GluParams& activation,
    const DeviceExpertsIo& io, DeviceTensor<float>* dRowWeight) {
  MOEWB_ASSIGN_OR_RETURN(ExpertsLaunchShape shape,
                         checkShapes("expertsBackwardCuda", x, offsets, weights, io));
  const int64_t rows = shape.maxRows, d = shape.d, f = shape.f;
  const bool weighted = io.rowWeight != nullptr;
  if (saved.hidden.rank() != 2 || saved.hidden.dim(0) != rows || saved.hidden.dim(1) != f ||
      dY.rank() != 2 || dY.dim(1) != d || (!weighted && dY.dim(0) != rows) ||
      grads.gate.numel() != weights.gate.numel() || grads.up.numel() != weights.up.numel() ||
      grads.down.numel() != weights.down.numel()) {
    return invalidArgument("expertsBackwardCuda: dY " + dY.shapeString() + ", saved hidden " +
                           saved.hidden.shapeString() + ", grads " + grads.gate.shapeString() +
                           " for " + std::to_string(rows) + " rows");
  }
  if (weighted && (dRowWeight == nullptr || dRowWeight->numel() < rows)) {
    return invalidArgument("expertsBackwardCuda: rowWeight needs dRowWeight of " +
                           std::to_string(rows) + " rows");
  }
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dx,
                         context.newTensor<bf16>({rows, d}, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dGate,
                         context.newTensor<bf16>({rows, f}, MemoryCategory::kWorkspace));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dUp,
                         context.newTensor<bf16>({rows, f}, MemoryCategory::kWorkspace));
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<int32_t> tileStart,
      context.newTensor<int32_t>({shape.experts + 1}, MemoryCategory::kWorkspace));
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<int32_t> expertOrder,
      context.newTensor<int32_t>({shape.experts}, MemoryCategory::kWorkspace));
  // Folded combine (mma path): the weighted dYPerm rows (rows < R, written by a pre-pass) and the
  // per-column-tile partial dots of dRowWeight.
  DeviceTensor<bf16> dYWeighted;
  DeviceTensor<float> rowWeightPartial;
  if (weighted) {
    MOEWB_ASSIGN_OR_RETURN(dYWeighted,
                           context.newTensor<bf16>({rows, d}, MemoryCategory::kWorkspace));
    const int64_t columnTiles = (d + kExpertsMmaTileN - 1) / kExpertsMmaTileN;
    MOEWB_ASSIGN_OR_RETURN(rowWeightPartial, context.newTensor<float>({columnTiles, rows},
                                                                      MemoryCategory::kWorkspace));
  }
  ExpertsBackwardArgs args;
  args.dY = dY.data();
  args.x = x.data();
  args.gatherIndex = io.gatherIndex != nullptr ? io.gatherIndex->data() : nullptr;
  args.rowWeight = weighted ? io.rowWeight->data() : nullptr;
  args.outputIndex = weighted ? io.outputIndex->data() : nullptr;
  args.offsets = offsets.data();
  args.gate = weights.gate.data();
  args.up = weights.up.data();
  args.down = weights.down.data();
  args.gatePre = saved.gatePre.data();
  args.upPre = saved.upPre.data();
  args.hidden = saved.hidden.data();
  args.tileStart = tileStart.data();
  args.expertOrder = expertOrder.data();
  args.dGate = dGate.data();
  args.dUp = dUp.data();
  args.dYWeighted = weighted ? dYWeighted.data() : nullptr;
  args.rowWeightPartial = weighted ? rowWeightPartial.data() : nullptr;
  args.dx = dx.data();
  args.gradGate = grads.gate.data();
  args.gradUp = grads.up.data();
  args.gradDown = grads.down.data();
  args.dRowWeight = weighted ? dRowWeight->data() : nullptr;
  MOEWB_RETURN_IF_ERROR(expertsBackwardLaunch(context.stream(), shape, args, activation));
  return Result<DeviceTensor<bf16>>(std::move(dx));
}

}  // namespace moewb::engine::cuda
