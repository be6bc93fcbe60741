// The GPU part of `moewb info`: kernel totals against step time and the GPU's idle gaps inside
// the steps. Prints nothing for traces without kernel rows (CPU runs, CUDA runs without
// --gpu-trace).
#pragma once

#include "moewb/storage/trace_reader.h"

namespace moewb::cli {

// Prints the kernel summary (count, total, mean, share of step time, the `top` kernels by total
// time) and the idle-gap summary to stdout. Read errors print one line and return.
void printGpuSummary(storage::TraceReader& reader, int top);

}  // namespace moewb::cli
