// GpuTraceKinds: names, parsing and the attribution note (see gpu_trace_kinds.h).
#include "moewb/profiler/gpu_trace_kinds.h"

#include <algorithm>
#include <array>
#include <utility>

namespace moewb::profiler {

namespace {

constexpr std::array<std::pair<const char*, GpuTraceKind>, 9> kNamed = {{
    {"kernel", GpuTraceKind::kKernel},
    {"memcpy", GpuTraceKind::kMemcpy},
    {"memset", GpuTraceKind::kMemset},
    {"memory", GpuTraceKind::kMemory},
    {"sync", GpuTraceKind::kSync},
    {"runtime", GpuTraceKind::kRuntime},
    {"driver", GpuTraceKind::kDriver},
    {"nvtx", GpuTraceKind::kNvtx},
    {"launch_api", GpuTraceKind::kLaunchApi},
}};

std::string trimmed(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

}  // namespace

std::string GpuTraceKinds::describe() const {
  if (*this == all()) return "all";
  if (*this == launches()) return "launches";
  if (empty()) return "none";
  std::string text;
  for (const auto& [name, kind] : kNamed) {
    if (!has(kind)) continue;
    if (!text.empty()) text += ',';
    text += name;
  }
  return text;
}

std::string GpuTraceKinds::attributionNote() const {
  const bool device = has(GpuTraceKind::kKernel) || has(GpuTraceKind::kMemcpy) ||
                      has(GpuTraceKind::kMemset) || has(GpuTraceKind::kMemory) ||
                      has(GpuTraceKind::kSync);
  if (!device) return "no kernel, copy, memset, memory or sync records are captured";
  if (!canAttribute()) {
    return "without runtime/driver API records kernels, copies and memsets cannot be "
           "attributed: they keep the step of their GPU time but no layer or phase";
  }
  std::string note = "kernels, copies and memsets are attributed through the API call that "
                     "launched them (correlation id)";
  const bool launchApiOnly = !has(GpuTraceKind::kRuntime) && !has(GpuTraceKind::kDriver);
  if (launchApiOnly) {
    note += "; only the API calls that launch, copy, set, allocate or wait are recorded";
  } else if (!has(GpuTraceKind::kDriver) && !has(GpuTraceKind::kLaunchApi)) {
    note += "; without driver records, work launched directly through the driver API "
            "(cuBLAS kernels) is not attributed";
  } else if (!has(GpuTraceKind::kRuntime) && !has(GpuTraceKind::kLaunchApi)) {
    note += "; without runtime records, work launched through the runtime API is attributed "
            "only through the driver call it made";
  }
  note += has(GpuTraceKind::kNvtx)
              ? " and the NVTX range around that call (step, layer, phase)"
              : "; without nvtx records they get phase \"step\" and no layer";
  return note;
}

bool isLaunchApiName(std::string_view name) {
  // Module loads and kernel lookups too: a lazily loaded module's static memory is allocated
  // inside them (records without a correlation id take the call that holds them).
  constexpr std::string_view kMarks[] = {"Launch",    "Memcpy",          "Memset",    "Malloc",
                                         "MemAlloc",  "Free",            "Load",      "GetKernel",
                                         "GetFunction", "Synchronize", "StreamWaitEvent"};
  return std::any_of(std::begin(kMarks), std::end(kMarks),
                     [&](std::string_view mark) { return name.find(mark) != name.npos; });
}

Result<GpuTraceKinds> parseGpuTraceKinds(const std::string& list) {
  const std::string accepted =
      std::string("accepted: a comma-separated list of ") + kGpuTraceKindNames +
      ", or the sets all, launches";
  if (trimmed(list).empty()) return invalidArgument("no GPU trace kind given; " + accepted);
  GpuTraceKinds kinds = GpuTraceKinds::none();
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string name = trimmed(list.substr(start, comma - start));
    start = comma + 1;
    if (name.empty()) {
      return invalidArgument("GPU trace kinds '" + list + "' have an empty entry; " + accepted);
    }
    if (name == "all" || name == "launches") {
      const GpuTraceKinds set = name == "all" ? GpuTraceKinds::all() : GpuTraceKinds::launches();
      kinds = GpuTraceKinds::fromBits(kinds.bits() | set.bits());
      continue;
    }
    const auto named = std::find_if(kNamed.begin(), kNamed.end(),
                                    [&](const auto& entry) { return name == entry.first; });
    if (named != kNamed.end()) {
      kinds = kinds.with(named->second);
    } else {
      return invalidArgument("'" + name + "' is not a GPU trace kind; " + accepted);
    }
  }
  return kinds;
}

}  // namespace moewb::profiler
