// mergeTraces: joins the per-rank trace files of one multi-process run (one process per GPU, each
// writing its own file) into one trace file of the same schema, as if the ranks had run in one
// process: one run row, every rank's tracks, slices, steps, collectives, memory and GPU rows, and
// the timestamps of every rank moved onto the clock of the lowest rank present.
//
// Operations, in order: every input is checked (a MoE Workbench trace with exactly one run; all
// from the same run: name, config TOML, backend and world size equal; disjoint ranks, each rank
// found in the rows' rank columns, inside [0, world size); no rank missing unless allowed) and the
// output path is checked (absent unless overwrite, not an input) before anything is written. Then
// the clock offsets are estimated, the rows are copied into a temporary file beside the output
// with per-file ids remapped (string, track and slice ids; GPU correlation ids when their ranges
// collide), and the temporary file is renamed onto the output; on any failure it is removed, so
// the output is either complete or absent.
//
// Clock alignment: processes (possibly on different hosts) have different steady clocks. For a
// file F its offset is the median, over the collectives that F's lowest rank and the reference
// rank (the lowest rank of all inputs) both ran (same comm_group, seq and peers, ok = 1), of
// (reference's end - F's end): a collective ends at about the same moment on every peer. Without
// a shared collective the run start times are aligned instead (and the result says so). Every
// time column of the file's rows (run, slice, counter, memory_event, step, collective,
// swap_event, config_change, tuner_trial, gpu_memory; the GPU detail tables hang off slices) is
// shifted by the offset. Offsets are recorded in meta rows clock_offset_ns.rank<r> and
// clock_alignment.rank<r> for every rank r.
//
// Cost: O(total rows) SQLite inserts (one INSERT ... SELECT per table and file over an attached
// read-only input) plus O(collectives) memory for the alignment.
// Thread-safety: reentrant; the files involved must not be merged into concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moewb/base/status.h"

namespace moewb::storage {

struct MergeOptions {
  bool overwrite = false;          // replace an existing output file
  bool allowMissingRanks = false;  // merge even when some ranks of [0, world size) have no file
};

// How a file's clock offset was found.
enum class ClockAlignmentMethod {
  kReference,    // the file holds the reference rank: offset 0
  kCollectives,  // median over shared collectives
  kRunStart,     // no shared collective: the run start times were aligned
};

// "reference", "collectives", "run_start".
const char* clockAlignmentName(ClockAlignmentMethod method);

// What was merged from one input file.
struct MergedInput {
  std::string path;
  std::vector<int32_t> ranks;  // global ranks its rows hold, ascending
  int64_t rows = 0;            // rows copied from it (every table but meta, run and string)
  int64_t clockOffsetNs = 0;   // added to each of its timestamps
  ClockAlignmentMethod alignment = ClockAlignmentMethod::kReference;
  int64_t sharedCollectives = 0;     // collectives matched with the reference (kCollectives)
  int64_t gpuCorrelationOffset = 0;  // added to its GPU correlation ids (0 = unchanged)
};

struct MergeResult {
  std::string outPath;
  int32_t worldSize = 0;
  std::vector<MergedInput> inputs;    // ordered by lowest rank
  std::vector<int32_t> missingRanks;  // ranks of [0, world size) in no input (allowMissingRanks)
  int64_t rows = 0;                   // sum of inputs[i].rows
};

// Merges the trace files `inputPaths` (one or more, any order) into a new trace at `outPath`.
// Errors (the output is not created or touched): kInvalidArgument for no inputs, an input named
// twice, inputs from different runs, a file with zero or several runs or without any rank rows,
// a rank outside [0, world size), a rank in two files, missing ranks without allowMissingRanks,
// or an output path that is an input or a directory; kAlreadyExists when `outPath` exists and
// !options.overwrite; the TraceReader::open errors (kNotFound, kDataLoss, kFailedPrecondition)
// for an input that is not a readable trace. Every message names the file and what was wrong.
// Errors while writing (kInternal, kResourceExhausted, kDataLoss for an input corrupt past its
// header) name the input being copied; the temporary file is removed.
Result<MergeResult> mergeTraces(const std::vector<std::string>& inputPaths,
                                const std::string& outPath, const MergeOptions& options = {});

}  // namespace moewb::storage
