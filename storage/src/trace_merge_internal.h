// The parts of mergeTraces (moewb/storage/trace_merge.h), each testable on its own:
// - inspectMergeSource (trace_merge_inspect.cpp): what merge needs from one input, read once
//   before anything is written: its run row, ranks, meta, collective end times, GPU correlation
//   id range.
// - checkMergeSources (trace_merge_inspect.cpp): the same-run, distinct-rank and missing-rank
//   checks over all inputs.
// - alignClock / medianNs (trace_merge_clock.cpp): the clock offset of one input.
// - copyMergeSource (trace_merge_copy.cpp), writeMergedRunAndMeta (trace_merge_run.cpp): the
//   INSERT ... SELECT of one attached input into the output, and the merged run and meta rows.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/storage/rows.h"
#include "moewb/storage/trace_merge.h"
#include "sqlite_util.h"

namespace moewb::storage::detail {

// One collective as every peer records it (collective table: comm_group, seq, peers).
struct CollectiveKey {
  std::string commGroup;
  int64_t seq = 0;
  std::string peers;
  auto operator<=>(const CollectiveKey&) const = default;
};

// Collective end times (start_ns + dur_ns, the file's own clock) by key: per key the row of the
// lowest rank of the file that ran it successfully (ok = 1).
using CollectiveEnds = std::map<CollectiveKey, int64_t>;

// What merge knows about one input before writing.
struct MergeSource {
  std::string path;
  std::string uri;             // the read-only "file:" URI it was inspected with (for ATTACH)
  RunRow run;                  // its only run row
  std::vector<int32_t> ranks;  // ascending, distinct
  std::map<std::string, std::string> meta;
  CollectiveEnds collectiveEnds;
  int64_t gpuCorrelationMin = 0;  // nonzero GPU correlation ids span [min, max];
  int64_t gpuCorrelationMax = 0;  //   both 0 without any
};

// Opens `path` as a trace (TraceReader::open's checks) and reads the above. Errors: the open
// errors; kInvalidArgument naming `path` when it holds no run or several runs, or no row with a
// rank (track, step, collective, expert_load, a2a_traffic); kDataLoss naming `path`, the value
// and the accepted range when its run's world_size is outside [1, kMaxWorldSize].
Result<MergeSource> inspectMergeSource(const std::string& path);

// Checks that `sources` (one or more) come from one run (name, config_toml, backend,
// world_size), that no rank is in two of them and that every rank is inside [0, world size).
// Returns the ranks of [0, world size) in no source, ascending; an error when there are some and
// !allowMissing. Errors: kInvalidArgument naming the files and what differs.
Result<std::vector<int32_t>> checkMergeSources(const std::vector<MergeSource>& sources,
                                               bool allowMissing);

// The median of `valuesNs` (the mean of the middle two for an even count, rounded toward
// negative infinity); 0 for an empty vector. Reorders `valuesNs`.
int64_t medianNs(std::vector<int64_t>& valuesNs);

struct ClockAlignment {
  int64_t offsetNs = 0;  // add to `other`'s timestamps to put them on `reference`'s clock
  ClockAlignmentMethod method = ClockAlignmentMethod::kReference;
  int64_t sharedCollectives = 0;
};

// The offset of `other` against `reference` (see trace_merge.h: median of end differences over
// shared collectives, else run start difference). Pure.
ClockAlignment alignClock(const MergeSource& reference, const MergeSource& other);

// How one source's values move in the output.
struct MergeShift {
  int64_t clockOffsetNs = 0;         // added to every timestamp (not to durations)
  int64_t trackIdOffset = 0;         // added to track ids
  int64_t sliceIdOffset = 0;         // added to slice ids
  int64_t gpuCorrelationOffset = 0;  // added to nonzero GPU correlation ids
  int64_t swapPlanIdOffset = 0;      // added to swap plan ids (swap_plan and its child rows)
  int64_t runId = 1;                 // the merged run's id, for every run column
};

// The tables copyMergeSource copies row by row, in copy order (meta, run and string are merged
// by writeMergedRunAndMeta and the string map instead). Together they and those three are every
// table of the schema (a test checks this against schemaSql()).
const std::vector<std::string>& mergedRowTables();

// The id offsets that put `src`'s track and slice ids after those already in `out` (0 when `out`
// has none). `out` must have the input attached as "src".
Result<MergeShift> idOffsetsForSource(Database& out);

// Copies every row of the input attached to `out` as schema "src" into `out`'s main schema,
// shifted and remapped by `shift`, interning its strings; `out` must be inside a transaction.
// Returns the rows copied per table (mergedRowTables() order). Errors: SQLite errors, prefixed
// with `sourcePath` and the table.
Result<std::vector<int64_t>> copyMergeSource(Database& out, const std::string& sourcePath,
                                             const MergeShift& shift);

// Writes the one run row (id runId) that stands for all `sources` (their run rows with each
// start/end shifted by its file's offset: earliest start, latest end, the worst status of
// failed > running > stopped > completed) and the meta rows: the reference's (sources[0]) meta,
// then per rank r clock_offset_ns.rank<r>, clock_alignment.rank<r>,
// clock_shared_collectives.rank<r>, merged_from.rank<r>, gpu_correlation_offset.rank<r> (when
// nonzero) and key.rank<r> for every meta key whose value differs between sources;
// max_slice_dur_ns of the merged slices. Adds warning stats rows for missing ranks and for files
// aligned by run start. `merged` is parallel to `sources`.
Status writeMergedRunAndMeta(Database& out, const std::vector<MergeSource>& sources,
                             const MergeResult& merged, int64_t runId);

}  // namespace moewb::storage::detail
