// The swap part of `moewb info`: the plan in force, what moved and what it cost per step range
// (the first swap step, which carries the warm-up, and the steps after it), the HBM peak with and
// without swap, the pinned pool's peak, and the layers with the most exposed copy time. Prints
// nothing for traces without swap rows.
#pragma once

#include "moewb/storage/trace_reader.h"

namespace moewb::cli {

// Prints the "swap" section to stdout; nothing when the trace has no swap plan, step or copy
// rows. Read errors print one line and return.
void printSwapSummary(storage::TraceReader& reader);

}  // namespace moewb::cli
