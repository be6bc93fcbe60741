// TimelineSummary: per-level summaries of a trace's timeline lanes, so a zoomed-out frame reads a
// few buckets per pixel column instead of the slices under it (issue 18).
//
// For each lane (track, depth) and zoom level L the summary holds the non-empty buckets of a
// fixed grid: bucket k of level L covers [originNs + k * w(L), originNs + (k + 1) * w(L)), with
// w(L) = bucketNs * 4^L. Per bucket: how many slices start in it, their busy time inside it (the
// overlap of each slice with the bucket; a zero-length slice counts 1 ns, as dominantSpans counts
// it) and its dominant name: the name with the most busy time inside the bucket (ties: the name
// first seen in the file, the smaller summary name index) with that name's busy time. Level 0 has
// at most about kTargetBuckets buckets over the file's span; each level is 4x coarser than the
// one below, up to the level where one bucket covers the span.
//
// SummaryBuilder makes one from slices handed over in start order per lane (as the loader reads
// them: any interleaving of lanes), in one pass: each slice touches only the level-0 buckets it
// overlaps; a level-0 bucket that no later slice can reach is finished and its per-name busy
// times are merged into its level-1 parent, and so on up, so the levels are exact (not derived
// from dominants). Cost: O(slices + buckets * names per bucket); memory O(open buckets) beyond
// the result. A slice that starts before a bucket already finished in its lane (a file whose
// lane is not in start order) cannot be counted exactly: the builder counts such slices
// (outOfOrder()) and the caller drops the summary (the timeline then paints from the slices).
//
// dominantSpansFromSummary paints a folded run from the level whose bucket is at most one pixel
// column wide: O(columns) per run. summaryLevelFor picks the level. A TimelineSummary is a plain
// value; read it from any thread while nobody mutates it.
//
// The sidecar file (writeSummaryFile / readSummaryFile, timeline_summary_file.cpp) keeps a summary
// beside its trace ("<trace>.summary") so a second open does not rebuild it; see docs/GUI.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moewb/base/ids.h"
#include "moewb/base/status.h"
#include "moewb/gui/timeline_data.h"

namespace moewb::gui {

// One non-empty bucket of one level of one lane (32 bytes).
struct SummaryBucket {
  int64_t index = 0;           // k: the bucket covers [origin + k * w(L), origin + (k + 1) * w(L))
  int64_t busyNs = 0;          // busy time of all slices inside the bucket, ns
  int64_t dominantBusyNs = 0;  // busy time of the dominant name inside the bucket, ns
  int32_t count = 0;           // slices starting in the bucket
  int32_t nameId = 0;          // dominant name: index into TimelineSummary::names (or a
                               // timeline name id once TimelineData::setSummary mapped it)
};

struct LaneSummary {
  TrackId track;
  int32_t depth = 0;
  std::vector<std::vector<SummaryBucket>> levels;  // [level][bucket], index ascending
};

// Identifies the trace a sidecar belongs to; a sidecar whose fingerprint differs is stale.
struct TraceFingerprint {
  int64_t fileBytes = 0;   // size of the trace file, bytes
  int64_t mtimeNs = 0;     // its modification time, ns since the epoch
  int64_t maxSliceId = 0;  // max(slice.id) of the trace, 0 when it has no slices
  bool operator==(const TraceFingerprint&) const = default;
};

struct TimelineSummary {
  static constexpr int64_t kTargetBuckets = 1 << 16;  // level-0 buckets over the span, at most
  static constexpr int kLevelShift = 2;               // each level is 4x the one below

  int64_t originNs = 0;  // start of bucket 0 of every level, ns
  int64_t bucketNs = 1;  // bucket width of level 0, ns (>= 1)
  int32_t levelCount = 1;
  int64_t sliceCount = 0;          // slices summarized
  bool partial = false;            // a part handed over while building (takeFinished)
  std::vector<std::string> names;  // names of the slices, by summary name index
  std::vector<LaneSummary> lanes;  // sorted by (track, depth)

  // Bucket width of `level`, ns.
  int64_t widthNs(int level) const { return bucketNs << (kLevelShift * level); }
  // The summary of lane (track, depth), or nullptr.
  const LaneSummary* lane(TrackId track, int32_t depth) const;
};

// The grid of a trace whose slices span `span`: origin at span.startNs, level-0 width at least
// span / kTargetBuckets, and levels up to one bucket over the span. Empty spans give one level.
void chooseSummaryGrid(TimeRange span, TimelineSummary* summary);

class SummaryBuilder {
 public:
  // A builder for slices inside `span` (the trace's time bounds; slices outside are clamped to
  // the first or last bucket).
  explicit SummaryBuilder(TimeRange span);
  ~SummaryBuilder();
  SummaryBuilder(const SummaryBuilder&) = delete;
  SummaryBuilder& operator=(const SummaryBuilder&) = delete;

  // The summary name index of `name`, adding it when new. Names are usually given once up
  // front by the caller (as the loader's name indexes grow); add() takes the index.
  int32_t addName(const std::string& name);
  // Adds one slice of lane (track, depth) named names[nameIndex]; a negative duration counts as
  // 0. O(buckets it overlaps) amortized.
  void add(TrackId track, int32_t depth, int64_t startNs, int64_t durNs, int32_t nameIndex);
  // Slices added that started before an already finished bucket of their lane; the summary of a
  // builder with any is not exact.
  int64_t outOfOrder() const;
  // The buckets finished since the last call (every level; names: all so far), as a partial
  // summary to append to what was taken before (appendSummary), so a load can hand the
  // summary over as it grows; nullptr when none finished.
  std::unique_ptr<TimelineSummary> takeFinished();
  // Finishes every open bucket (no slice may be added after it): takeFinished() then gives the
  // rest, and all() the whole summary.
  void close();
  // Everything finished so far, taken or not (after close(): the whole summary).
  const TimelineSummary& all() const;
  // Finishes every open bucket and returns the whole summary; the builder is empty afterwards.
  TimelineSummary finish();

 private:
  struct State;
  std::unique_ptr<State> m_state;
};

// Appends the buckets of `part` (a takeFinished() of the builder that made `into`'s earlier
// parts: same grid, names a continuation) to `into`, lane by lane and level by level; `into`
// takes part's names. False (nothing changed) when the grids differ. O(buckets of part).
bool appendSummary(TimelineSummary* into, TimelineSummary&& part);

// The level to paint a window of `nsPerPx` ns per pixel from: the coarsest whose buckets are at
// most one pixel column wide, or -1 when even level 0 is wider (then paint from the slices).
int summaryLevelFor(const TimelineSummary& summary, double nsPerPx);

// Dominant spans (as dominantSpans gives them for slices) of [startNs, endNs) of lane `lane` in
// window `g`, from level `level`: per pixel column the name with the most dominant busy time of
// the buckets in it (a bucket that straddles two columns is shared in proportion to its overlap),
// its busy fraction the buckets' busy time over the column's. Tagged with `laneIndex`; ordered
// by x; adjacent columns with the same name merged. O(log buckets + columns).
std::vector<DominantSpan> dominantSpansFromSummary(const TimelineSummary& summary,
                                                   const LaneSummary& lane, int level,
                                                   int32_t laneIndex, int64_t startNs,
                                                   int64_t endNs, const TimelineGeometry& g);

// "<trace>.summary": where the sidecar of `tracePath` lives.
std::string summaryFilePath(const std::string& tracePath);
// Writes `summary` of the trace with `fingerprint` to `path` (through a temporary file renamed
// into place, so a reader never sees half a file). Errors: kFailedPrecondition naming the path when
// it cannot be written (a read-only directory: the caller goes on without a sidecar).
Status writeSummaryFile(const std::string& path, const TimelineSummary& summary,
                        const TraceFingerprint& fingerprint);
// Reads the sidecar at `path` when it belongs to the trace with `fingerprint`. Everything is
// validated before use (magic, version, size, fingerprint, counts and bounds of every field,
// bucket order, name indexes, a checksum over the whole file): a sidecar that is missing,
// stale, truncated, damaged or foreign gives an error, never a crash or a wrong summary.
// Errors: kNotFound (no sidecar), kFailedPrecondition (stale: another trace or version),
// kDataLoss (damaged); each names the path.
Result<TimelineSummary> readSummaryFile(const std::string& path,
                                        const TraceFingerprint& fingerprint);
// The fingerprint of the file at `tracePath` with `maxSliceId`. Errors: kNotFound naming it.
Result<TraceFingerprint> traceFingerprint(const std::string& tracePath, int64_t maxSliceId);

}  // namespace moewb::gui
