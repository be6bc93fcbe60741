// Host side of the grouped GPU experts: shape checks and allocation (see experts_cuda.h); the
// kernels are in experts_cuda.cu.
#include "ops/experts/experts_cuda.h"

#include <atomic>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "ops/experts/expert_kernel_choice.h"
#include "ops/experts/experts_cuda_kernels.h"
#include "ops/experts/experts_wgmma_cuda.h"

namespace moewb::engine::cuda {
namespace {

std::atomic<int> gWgmmaMode{int(ExpertsWgmmaMode::kEnvironment)};

// "NAME=value" of the first experts switch in the environment with a value it does not accept
// (empty when none), and the accepted values; written while this file's globals are initialised,
// read by expertsWgmmaStages, which fails the launch with it.
struct BadSwitch {
  std::string setting;
  std::string accepted;
};

BadSwitch& badSwitch() {
  static BadSwitch value;
  return value;
}

void noteBadSwitch(const char* name, const char* text, const char* accepted) {
  if (!badSwitch().setting.empty()) return;
  badSwitch().setting = std::string(name) + "=" + text;
  badSwitch().accepted = accepted;
}

// A two-way switch from the environment variable `name`, read once per process by the global it
// initialises: "1" on, "0" off, unset `fallback`; any other value keeps `fallback` and is noted
// for expertsWgmmaStages (A/B runs must not silently measure the default).
bool environmentSwitch(const char* name, bool fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  const std::string value = text;
  if (value == "1") return true;
  if (value == "0") return false;
  noteBadSwitch(name, text, "1 (on) or 0 (off)");
  return fallback;
}

// MOEWB_GROUPED_WGRAD_WALK: skew (the default), static or dynamic (ExpertsWgradWalk).
ExpertsWgradWalk wgradWalkFromEnvironment() {
  const char* text = std::getenv("MOEWB_GROUPED_WGRAD_WALK");
  if (text == nullptr) return ExpertsWgradWalk::kBySkew;
  const std::string value = text;
  if (value == "skew") return ExpertsWgradWalk::kBySkew;
  if (value == "static") return ExpertsWgradWalk::kStatic;
  if (value == "dynamic") return ExpertsWgradWalk::kDynamic;
  noteBadSwitch("MOEWB_GROUPED_WGRAD_WALK", text, "skew, static or dynamic");
  return ExpertsWgradWalk::kBySkew;
}

std::atomic<bool> gWarpSpecialized{
    environmentSwitch("MOEWB_GROUPED_WS", kExpertsWarpSpecializedDefault)};
// The process defaults of the switches a run's [kernels] may override (applyExpertKernelChoice's
// "auto"), read from the environment once.
const bool kEnvGluPingPong = environmentSwitch("MOEWB_GROUPED_WS_GLU", kExpertsGluPingPongDefault);
const bool kEnvGluSplit = environmentSwitch("MOEWB_GROUPED_GLU_SPLIT", kExpertsGluSplitDefault);
const ExpertsWgradWalk kEnvWgradWalk = wgradWalkFromEnvironment();
std::atomic<bool> gGluPingPong{kEnvGluPingPong};
std::atomic<bool> gWsWgrad{environmentSwitch("MOEWB_GROUPED_WS_WGRAD", kExpertsWsWgradDefault)};
std::atomic<bool> gGluSplit{kEnvGluSplit};
std::atomic<int> gWgradWalk{int(kEnvWgradWalk)};

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

void setExpertsGluSplit(bool on) {
  gGluSplit.store(on);
}

bool expertsGluSplit() {
  return gGluSplit.load();
}

void setExpertsWsWgrad(bool on) {
  gWsWgrad.store(on);
}

bool expertsWsWgrad() {
  return gWsWgrad.load();
}

void setExpertsWgradWalk(ExpertsWgradWalk walk) {
  gWgradWalk.store(int(walk));
}

ExpertsWgradWalk expertsWgradWalk() {
  return ExpertsWgradWalk(gWgradWalk.load());
}

Status applyExpertKernelChoice(const std::string& glu, const std::string& wgradWalk) {
  bool split = kEnvGluSplit, pingPong = kEnvGluPingPong;
  if (glu == "split") {
    split = true;
  } else if (glu == "pingpong") {
    split = false;
    pingPong = true;
  } else if (glu == "fused") {
    split = false;
    pingPong = false;
  } else if (glu != "auto") {
    return invalidArgument("kernels.expert_glu = \"" + glu +
                           "\" is not a kernel choice; accepted: auto, split, pingpong, fused");
  }
  ExpertsWgradWalk walk = kEnvWgradWalk;
  if (wgradWalk == "skew") {
    walk = ExpertsWgradWalk::kBySkew;
  } else if (wgradWalk == "static") {
    walk = ExpertsWgradWalk::kStatic;
  } else if (wgradWalk == "dynamic") {
    walk = ExpertsWgradWalk::kDynamic;
  } else if (wgradWalk != "auto") {
    return invalidArgument("kernels.expert_wgrad_walk = \"" + wgradWalk +
                           "\" is not a tile walk; accepted: auto, skew, static, dynamic");
  }
  setExpertsGluSplit(split);
  setExpertsGluPingPong(pingPong);
  setExpertsWgradWalk(walk);
  return Status::ok();
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
  if (!badSwitch().setting.empty()) {
    return invalidArgument(badSwitch().setting + ": accepted values are " + badSwitch().accepted +
                           " (docs/GPU.md, the grouped expert kernels)");
  }
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

namespace {

// The forward's launch arguments over `saved`'s tensors (y and tileStart left to the caller).
ExpertsForwardArgs forwardArgs(const DeviceTensor<bf16>& x, const DeviceTensor<int32_t>& offsets,
                               const DeviceExpertWeights& weights, DeviceExpertsSaved& saved,
                               const DeviceExpertsIo& io) {
  ExpertsForwardArgs args;
  args.x = x.data();
  args.gatherIndex = io.gatherIndex != nullptr ? io.gatherIndex->data() : nullptr;
  args.offsets = offsets.data();
  args.gate = weights.gate.data();
  args.up = weights.up.data();
  args.down = weights.down.data();
  args.rowWeight = io.rowWeight != nullptr ? io.rowWeight->data() : nullptr;
  args.gatePre = saved.gatePre.data();
  args.upPre = saved.upPre.data();
  args.hidden = saved.hidden.data();
  return args;
}

}  // namespace

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
  ExpertsForwardArgs args = forwardArgs(x, offsets, weights, saved, io);
  args.tileStart = tileStart.data();
  args.y = y.data();
  MOEWB_RETURN_IF_ERROR(expertsForwardLaunch(context.stream(), shape, args, activation));
  return Result<DeviceTensor<bf16>>(std::move(y));
}

Status expertsRecomputeCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                            const DeviceTensor<int32_t>& offsets,
                            const DeviceExpertWeights& weights, DeviceExpertsSaved& saved,
                            const GluParams& activation, const DeviceExpertsIo& io) {
  MOEWB_ASSIGN_OR_RETURN(ExpertsLaunchShape shape,
                         checkShapes("expertsRecomputeCuda", x, offsets, weights, io));
  const int64_t rows = shape.maxRows, f = shape.f;
  for (DeviceTensor<bf16>* t : {&saved.gatePre, &saved.upPre, &saved.hidden}) {
    if (!t->empty() && (t->rank() != 2 || t->dim(0) != rows || t->dim(1) != f)) {
      return invalidArgument("expertsRecomputeCuda: a kept tensor is " + t->shapeString() +
                             ", expected [" + std::to_string(rows) + ", " + std::to_string(f) +
                             "]");
    }
    if (t->empty()) {
      MOEWB_ASSIGN_OR_RETURN(*t, context.newTensor<bf16>({rows, f}, MemoryCategory::kActivations));
    }
  }
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<int32_t> tileStart,
      context.newTensor<int32_t>({shape.experts + 1}, MemoryCategory::kWorkspace));
  ExpertsForwardArgs args = forwardArgs(x, offsets, weights, saved, io);
  args.tileStart = tileStart.data();
  return expertsForwardLaunch(context.stream(), shape, args, activation);
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
  // Round 9's split dh (expertsGluSplit): the fp32 dh rows before the GLU backward.
  DeviceTensor<float> dHidden;
  if (expertsGluSplit() && expertsWgmmaSupported()) {
    MOEWB_ASSIGN_OR_RETURN(dHidden,
                           context.newTensor<float>({rows, f}, MemoryCategory::kWorkspace));
  }
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<int32_t> tileStart,
      context.newTensor<int32_t>({shape.experts + 1}, MemoryCategory::kWorkspace));
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<int32_t> expertOrder,
      context.newTensor<int32_t>({shape.experts}, MemoryCategory::kWorkspace));
  // Round 6's tile tickets, one counter per weight gradient (zeroed by the backward launch).
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<int32_t> wgradTickets,
                         context.newTensor<int32_t>({3}, MemoryCategory::kWorkspace));
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
  args.wgradTickets = wgradTickets.data();
  args.dGate = dGate.data();
  args.dUp = dUp.data();
  args.dHidden = dHidden.empty() ? nullptr : dHidden.data();
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
