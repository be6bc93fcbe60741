// `moewb info`: the kernel and GPU idle-gap summaries (see gpu_info.h).
#include "gpu_info.h"

#include <cstdio>
#include <string>

#include "moewb/base/units.h"
#include "moewb/storage/gpu_summary.h"

namespace moewb::cli {

namespace {

constexpr size_t kNameWidth = 48;

// Long template-heavy kernel names are cut in the middle so both ends stay readable.
// What a reader recognises a kernel by: its qualified name without "(anonymous namespace)::",
// without the return type of a template and without the parameter list (Nsight's short form),
// elided in the middle when still too wide.
std::string shortened(const std::string& demangled) {
  std::string name = demangled;
  const std::string anonymous = "(anonymous namespace)::";
  for (size_t at = name.find(anonymous); at != std::string::npos; at = name.find(anonymous)) {
    name.erase(at, anonymous.size());
  }
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);
  int depth = 0;  // template angle brackets
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    if (name[i] == '>') --depth;
    if (name[i] == '(' && depth == 0 && i > 0) {
      name.resize(i);
      break;
    }
  }
  if (name.size() <= kNameWidth) return name;
  const size_t keep = (kNameWidth - 3) / 2;
  return name.substr(0, keep) + "..." + name.substr(name.size() - keep);
}

void printIdle(const storage::GpuIdleSummary& idle) {
  if (idle.steps == 0) return;
  std::printf("\nGPU idle inside steps (no kernel, copy or memset on any stream)\n");
  std::printf("  idle %s of %s step time (%.1f%%) over %lld steps; %lld gaps: %lld < 10 us, "
              "%lld < 100 us, %lld < 1 ms, %lld >= 1 ms\n",
              formatDurationNs(idle.idleNs).c_str(), formatDurationNs(idle.stepNs).c_str(),
              100.0 * idle.idleShare(), (long long)idle.steps, (long long)idle.gapCount,
              (long long)idle.gapsByLength[0], (long long)idle.gapsByLength[1],
              (long long)idle.gapsByLength[2], (long long)idle.gapsByLength[3]);
  if (idle.gapCount > 0) {
    std::printf("  largest gap %s in step %lld\n", formatDurationNs(idle.largestGapNs).c_str(),
                (long long)idle.largestGapStep);
  }
}

}  // namespace

void printGpuSummary(storage::TraceReader& reader, int top) {
  auto kernels = storage::kernelSummary(reader, top);
  if (!kernels.isOk()) {
    std::printf("\nGPU kernels: %s\n", kernels.status().message().c_str());
    return;
  }
  if (kernels->kernelCount == 0) return;
  const storage::KernelSummary& k = *kernels;
  // A captured foreign program (moewb capture) has no steps: no share of step time to print.
  const bool hasSteps = k.stepTotalNs > 0;
  auto idle = storage::gpuIdleSummary(reader);
  std::printf("\nGPU kernels  %lld launches, total %s, mean %s", (long long)k.kernelCount,
              formatDurationNs(k.kernelTotalNs).c_str(),
              formatDurationNs(int64_t(k.meanNs())).c_str());
  if (hasSteps) std::printf(", %.1f%% of step time", 100.0 * k.shareOfSteps(k.kernelTotalNs));
  if (hasSteps && idle.isOk() && idle->steps > 0) {
    // Launches per step: what CUDA graphs and fusion cut (set-up kernels before the first step
    // are counted too, so this is an upper bound for short traces).
    std::printf("; %.0f per step over %lld captured steps",
                double(k.kernelCount) / double(idle->steps), (long long)idle->steps);
  }
  std::printf("\n");
  std::printf("  %-48s %8s %12s %12s %7s\n", "kernel", "count", "total", "mean", "share");
  for (const storage::PhaseTotal& t : k.topKernels) {
    std::printf("  %-48s %8lld %12s %12s %6.1f%%\n", shortened(t.name).c_str(),
                (long long)t.count, formatDurationNs(t.totalNs).c_str(),
                formatDurationNs(int64_t(t.meanNs())).c_str(), 100.0 * k.shareOfSteps(t.totalNs));
  }
  if (!idle.isOk()) {
    std::printf("\nGPU idle: %s\n", idle.status().message().c_str());
    return;
  }
  printIdle(*idle);
}

}  // namespace moewb::cli
