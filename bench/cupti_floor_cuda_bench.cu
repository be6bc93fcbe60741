// The floor cost of CUPTI kernel tracing per kernel on this GPU, for plain stream launches and for
// CUDA graph replays, with nothing else in the process: one kernel (a dependent multiply-add loop
// in every thread of one block per SM) launched --kernels times back to back, either as that many
// <<<>>> launches into a stream or as one replay of a graph captured from them. Tracing modes:
//   none         no CUPTI at all
//   kernel       CONCURRENT_KERNEL records (what `--gpu-trace-kinds kernel` enables)
//   kernel_api   CONCURRENT_KERNEL + RUNTIME + DRIVER records
//   graph_trace  GRAPH_TRACE: one record per graph launch instead of one per kernel (graph only)
// Kernel sizes (loop counts): tiny (1 iteration: the GPU's ~1 us back-to-back floor), small
// (2000: ~5 us), medium (20000: ~50 us); the untraced us/kernel in the output shows the real size.
// Each (launch, tracing, size) runs in a child process of its own (this program re-run with
// --child), so CUPTI's state never leaks into another case. A child times 5 warm-up + 40 launches
// (steady clock around the launch and cudaStreamSynchronize), flushes CUPTI after each outside the
// timed region, and reports the median launch time / kernels, the records its buffer callback
// parsed per timed launch and the records CUPTI dropped. The cases alternate for --reps rounds;
// each case's figure is the median of its rounds.
// Output: one JSON line per case (added us/kernel and overhead against the untraced case of the
// same launch and size), then a Markdown table of all of them.
// Usage: cupti_floor_cuda_bench [--kernels N] [--reps R]
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "child_process.h"

#define MOEWB_FLOOR_CUDA(call) checkCuda((call), #call)
#define MOEWB_FLOOR_CUPTI(call) checkCupti((call), #call)

namespace {

constexpr int kWarmupLaunches = 5;
constexpr int kTimedLaunches = 40;
constexpr int kThreadsPerBlock = 256;
constexpr size_t kActivityBufferBytes = size_t(8) << 20;  // aligned to 8 bytes, as CUPTI wants

struct Tracing {
  const char* name;
  bool graphOnly;
  std::vector<CUpti_ActivityKind> kinds;  // empty: CUPTI stays untouched
};

const Tracing kTracings[] = {
    {"none", false, {}},
    {"kernel", false, {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL}},
    {"kernel_api",
     false,
     {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME,
      CUPTI_ACTIVITY_KIND_DRIVER}},
    {"graph_trace", true, {CUPTI_ACTIVITY_KIND_GRAPH_TRACE}},
};

struct KernelSize {
  const char* name;
  int iterations;  // of the multiply-add loop in each thread
};

const KernelSize kSizes[] = {{"tiny", 1}, {"small", 2000}, {"medium", 20000}};

// Also called from CUPTI's callbacks (maybe on a thread of CUPTI's), hence _Exit after a flush.
[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "cupti_floor_cuda_bench: %s\n", what.c_str());
  std::fflush(nullptr);
  std::_Exit(1);
}

void checkCuda(cudaError_t result, const char* call) {
  if (result == cudaSuccess) return;
  fail(std::string(call) + " failed: " + cudaGetErrorString(result) + " (" +
       cudaGetErrorName(result) + ")");
}

void checkCupti(CUptiResult result, const char* call) {
  if (result == CUPTI_SUCCESS) return;
  const char* message = nullptr;
  if (cuptiGetResultString(result, &message) != CUPTI_SUCCESS || message == nullptr) {
    message = "unknown CUPTI error";
  }
  fail(std::string(call) + " failed: " + message + " (CUPTI error " + std::to_string(int(result)) +
       ")");
}

__global__ void floor_work_kernel(float* __restrict__ values, int iterations) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = values[i];
  for (int k = 0; k < iterations; ++k) v = v * 0.999f + 0.001f;
  values[i] = v;
}

// Shared by the CUPTI buffer callbacks and the child's main thread. Buffers are reused, so no
// timed launch pays for fresh pages.
std::mutex g_bufferMutex;
std::vector<uint8_t*> g_freeBuffers;  // guarded by g_bufferMutex
std::atomic<int64_t> g_records{0};
std::atomic<int64_t> g_droppedRecords{0};

void CUPTIAPI onBufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords) {
  std::lock_guard lock(g_bufferMutex);
  uint8_t* b = nullptr;
  if (!g_freeBuffers.empty()) {
    b = g_freeBuffers.back();
    g_freeBuffers.pop_back();
  } else {
    b = static_cast<uint8_t*>(std::aligned_alloc(8, kActivityBufferBytes));
  }
  *buffer = b;  // null: CUPTI drops the records and counts them
  *size = b != nullptr ? kActivityBufferBytes : 0;
  *maxNumRecords = 0;
}

void CUPTIAPI onBufferCompleted(CUcontext context, uint32_t streamId, uint8_t* buffer, size_t,
                                size_t validBytes) {
  size_t dropped = 0;
  MOEWB_FLOOR_CUPTI(cuptiActivityGetNumDroppedRecords(context, streamId, &dropped));
  g_droppedRecords += int64_t(dropped);
  if (buffer == nullptr) return;
  CUpti_Activity* record = nullptr;
  int64_t count = 0;
  CUptiResult result = CUPTI_SUCCESS;
  while ((result = cuptiActivityGetNextRecord(buffer, validBytes, &record)) == CUPTI_SUCCESS) {
    ++count;
  }
  if (result != CUPTI_ERROR_MAX_LIMIT_REACHED) checkCupti(result, "cuptiActivityGetNextRecord");
  g_records += count;
  std::lock_guard lock(g_bufferMutex);
  g_freeBuffers.push_back(buffer);
}

struct ChildFigures {
  double usPerKernel = 0;       // median launch time / kernels
  double recordsPerLaunch = 0;  // CUPTI records per timed launch
  double droppedRecords = 0;    // in the whole child
};

// Median us of `launchOnce` + cudaStreamSynchronize over the timed launches; with tracing on,
// CUPTI is flushed after each outside the timed region and only the timed launches' records count.
template <typename LaunchOnce>
double medianLaunchUs(cudaStream_t stream, bool traced, LaunchOnce launchOnce) {
  std::vector<double> launchUs;
  for (int rep = 0; rep < kWarmupLaunches + kTimedLaunches; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    launchOnce();
    MOEWB_FLOOR_CUDA(cudaStreamSynchronize(stream));
    const auto end = std::chrono::steady_clock::now();
    // A launch error stays pending until read: reading it once per launch keeps the check out
    // of the timed region (and, under kernel_api, out of the records).
    MOEWB_FLOOR_CUDA(cudaGetLastError());
    if (traced) MOEWB_FLOOR_CUPTI(cuptiActivityFlushAll(0));
    if (rep >= kWarmupLaunches) {
      launchUs.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    } else if (traced && rep == kWarmupLaunches - 1) {
      MOEWB_FLOOR_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
      g_records = 0;
    }
  }
  std::sort(launchUs.begin(), launchUs.end());
  return launchUs[launchUs.size() / 2];
}

// One case in this process. CUPTI is enabled before the graph is captured, so that its kernel
// nodes are traced too.
ChildFigures runCase(bool graphLaunch, const Tracing& tracing, const KernelSize& size,
                     int kernels) {
  MOEWB_FLOOR_CUDA(cudaSetDevice(0));
  int smCount = 0;
  MOEWB_FLOOR_CUDA(cudaDeviceGetAttribute(&smCount, cudaDevAttrMultiProcessorCount, 0));
  const size_t valueBytes = size_t(smCount) * kThreadsPerBlock * sizeof(float);
  float* values = nullptr;  // [smCount * kThreadsPerBlock]
  MOEWB_FLOOR_CUDA(cudaMalloc(&values, valueBytes));
  MOEWB_FLOOR_CUDA(cudaMemset(values, 0, valueBytes));
  cudaStream_t stream = nullptr;
  MOEWB_FLOOR_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const bool traced = !tracing.kinds.empty();
  if (traced) {
    MOEWB_FLOOR_CUPTI(cuptiActivityRegisterCallbacks(onBufferRequested, onBufferCompleted));
    for (CUpti_ActivityKind kind : tracing.kinds) MOEWB_FLOOR_CUPTI(cuptiActivityEnable(kind));
  }
  auto launchKernels = [&] {
    for (int i = 0; i < kernels; ++i) {
      floor_work_kernel<<<smCount, kThreadsPerBlock, 0, stream>>>(values, size.iterations);
    }
  };
  ChildFigures figures;
  cudaGraphExec_t graphExec = nullptr;
  if (graphLaunch) {
    cudaGraph_t graph = nullptr;
    MOEWB_FLOOR_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    launchKernels();
    MOEWB_FLOOR_CUDA(cudaStreamEndCapture(stream, &graph));
    MOEWB_FLOOR_CUDA(cudaGetLastError());
    MOEWB_FLOOR_CUDA(cudaGraphInstantiate(&graphExec, graph, 0));
    MOEWB_FLOOR_CUDA(cudaGraphDestroy(graph));
    figures.usPerKernel =
        medianLaunchUs(stream, traced,
                       [&] { MOEWB_FLOOR_CUDA(cudaGraphLaunch(graphExec, stream)); }) /
        kernels;
  } else {
    figures.usPerKernel = medianLaunchUs(stream, traced, launchKernels) / kernels;
  }
  if (traced) {
    MOEWB_FLOOR_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    size_t globalDropped = 0;
    MOEWB_FLOOR_CUPTI(cuptiActivityGetNumDroppedRecords(nullptr, 0, &globalDropped));
    for (CUpti_ActivityKind kind : tracing.kinds) MOEWB_FLOOR_CUPTI(cuptiActivityDisable(kind));
    figures.recordsPerLaunch = double(g_records.load()) / kTimedLaunches;
    figures.droppedRecords = double(g_droppedRecords.load() + int64_t(globalDropped));
  }
  if (graphExec != nullptr) MOEWB_FLOOR_CUDA(cudaGraphExecDestroy(graphExec));
  MOEWB_FLOOR_CUDA(cudaStreamDestroy(stream));
  MOEWB_FLOOR_CUDA(cudaFree(values));
  return figures;
}

struct Case {
  bool graphLaunch;
  const Tracing* tracing;
  const KernelSize* size;
  std::vector<double> usPerKernelRounds;  // one per round that succeeded
  ChildFigures last;                      // of the last round that succeeded
  double maxDroppedRecords = 0;           // over the rounds
  int failedRounds = 0;
  const char* launch() const { return graphLaunch ? "graph" : "stream"; }
};

// Runs this program with --child for one case and adds its figures to c.
void runChild(const std::string& self, Case& c, int kernels, int round) {
  const std::string command = "'" + self + "' --child " + c.launch() + " " + c.tracing->name + " " +
                              c.size->name + " --kernels " + std::to_string(kernels);
  const std::optional<std::string> line = moewb::bench::childOutputLine(command);
  ChildFigures f;
  if (!line ||
      std::sscanf(line->c_str(),
                  "{\"us_per_kernel\": %lf, \"records_per_launch\": %lf, \"dropped\": %lf}",
                  &f.usPerKernel, &f.recordsPerLaunch, &f.droppedRecords) != 3) {
    std::fprintf(stderr, "cupti_floor_cuda_bench: child failed: %s\n", command.c_str());
    ++c.failedRounds;
    return;
  }
  c.usPerKernelRounds.push_back(f.usPerKernel);
  c.last = f;
  c.maxDroppedRecords = std::max(c.maxDroppedRecords, f.droppedRecords);
  std::fprintf(stderr, "  %s %s %s round %d: %.3f us/kernel\n", c.launch(), c.tracing->name,
               c.size->name, round + 1, f.usPerKernel);
}

// One JSON line per case, then the Markdown table; "added" is against the untraced case of the
// same launch and size.
void printResults(const std::vector<Case>& cases, int kernels, int reps) {
  std::string table =
      "\n| launch | size | tracing | us/kernel | added us/kernel | overhead | records/launch | "
      "dropped |\n|---|---|---|---|---|---|---|---|\n";
  for (const Case& c : cases) {
    double baseUs = std::nan("");
    for (const Case& u : cases) {
      if (u.tracing->kinds.empty() && u.graphLaunch == c.graphLaunch && u.size == c.size) {
        baseUs = moewb::bench::median(u.usPerKernelRounds);
      }
    }
    const double us = moewb::bench::median(c.usPerKernelRounds);
    const bool ok = !std::isnan(us) && !std::isnan(baseUs);
    const double addedUs = ok ? us - baseUs : 0, overheadPct = ok ? 100.0 * (us / baseUs - 1) : 0;
    std::printf(
        "{\"name\": \"moewb_cupti_floor_%s_%s_%s\", \"launch\": \"%s\", \"tracing\": \"%s\", "
        "\"size\": \"%s\", \"kernels\": %d, \"us_per_kernel\": %.3f, "
        "\"added_us_per_kernel\": %.3f, \"overhead_pct\": %.1f, \"records_per_launch\": %.1f, "
        "\"dropped\": %.0f, \"reps\": %d, \"failed_rounds\": %d}\n",
        c.launch(), c.tracing->name, c.size->name, c.launch(), c.tracing->name, c.size->name,
        kernels, std::isnan(us) ? -1.0 : us, addedUs, overheadPct, c.last.recordsPerLaunch,
        c.maxDroppedRecords, reps, c.failedRounds);
    char row[256];
    std::snprintf(row, sizeof row, "| %s | %s | %s | ", c.launch(), c.size->name, c.tracing->name);
    table += row;
    std::snprintf(row, sizeof row, "%.2f | %+.2f | %+.1f%% | %.0f | %.0f |\n", us, addedUs,
                  overheadPct, c.last.recordsPerLaunch, c.maxDroppedRecords);
    table += std::isnan(us) ? "failed | - | - | - | - |\n" : row;
  }
  std::printf("%s", table.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int kernels = 800, reps = 2;
  const char* childArgs[3] = {nullptr, nullptr, nullptr};  // launch, tracing, size
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--kernels") && i + 1 < argc) {
      kernels = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--child") && i + 3 < argc) {
      for (const char*& arg : childArgs) arg = argv[++i];
    } else {
      std::fprintf(stderr, "unknown argument %s\nusage: %s [--kernels N] [--reps R]\n", argv[i],
                   argv[0]);
      return 2;
    }
  }
  if (kernels < 1 || reps < 1) {
    std::fprintf(stderr, "--kernels and --reps must be >= 1\n");
    return 2;
  }
  if (childArgs[0] != nullptr) {
    const bool graphLaunch = !std::strcmp(childArgs[0], "graph");
    const Tracing* tracing = nullptr;
    const KernelSize* size = nullptr;
    for (const Tracing& t : kTracings) tracing = !std::strcmp(t.name, childArgs[1]) ? &t : tracing;
    for (const KernelSize& s : kSizes) size = !std::strcmp(s.name, childArgs[2]) ? &s : size;
    if ((!graphLaunch && std::strcmp(childArgs[0], "stream")) || tracing == nullptr ||
        size == nullptr || (!graphLaunch && tracing->graphOnly)) {
      fail(std::string("--child: unknown case ") + childArgs[0] + " " + childArgs[1] + " " +
           childArgs[2]);
    }
    const ChildFigures f = runCase(graphLaunch, *tracing, *size, kernels);
    std::printf("{\"us_per_kernel\": %.4f, \"records_per_launch\": %.2f, \"dropped\": %.0f}\n",
                f.usPerKernel, f.recordsPerLaunch, f.droppedRecords);
    return 0;
  }
  // Without a usable GPU, say so once here rather than in every child.
  int deviceCount = 0;
  MOEWB_FLOOR_CUDA(cudaGetDeviceCount(&deviceCount));
  if (deviceCount == 0) fail("no CUDA device");
  std::vector<Case> cases;
  for (const KernelSize& size : kSizes) {
    for (bool graphLaunch : {false, true}) {
      for (const Tracing& tracing : kTracings) {
        if (tracing.graphOnly && !graphLaunch) continue;
        cases.push_back({graphLaunch, &tracing, &size, {}, {}, 0, 0});
      }
    }
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (int round = 0; round < reps; ++round) {
    for (Case& c : cases) runChild(self, c, kernels, round);
  }
  printResults(cases, kernels, reps);
  for (const Case& c : cases) {
    if (c.failedRounds > 0) return 1;
  }
  return 0;
}
