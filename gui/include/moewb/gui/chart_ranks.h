// Per-rank lines of the step charts (loss, step time, grad norm, learning rate) for traces of
// parallel runs, where every rank commits its own step rows.
//
// rankLines turns the step rows of all ranks into the lines one chart draws for a RankChoice:
// - one rank: that rank's points;
// - all ranks: one line per rank while there are at most kMaxRankLines ranks, else the band;
// - band: per step the smallest, the median and the largest value over the ranks (three lines),
//   so 64 ranks draw 3 lines, not 64.
// When every rank's points are bitwise equal (the all-reduced loss, the schedule's lr), the lines
// collapse into one named "all N ranks equal". A one-rank trace gives one unnamed line (the chart
// as before). stepRanks lists the ranks that have step rows. Both are O(rows log rows); pure
// functions, safe from any thread.
#pragma once

#include <QPointF>
#include <QString>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "moewb/storage/rows.h"

namespace moewb::gui {

// Past this many ranks "all ranks" draws the min / median / max band instead of a line per rank.
inline constexpr int kMaxRankLines = 8;

// What the step charts show of a parallel trace's ranks.
struct RankChoice {
  enum class View { kAll, kOne, kBand };
  View view = View::kAll;
  int32_t rank = 0;  // the rank shown by kOne
  bool operator==(const RankChoice&) const = default;
};

// One line of a chart built from the ranks' step rows.
struct RankLine {
  enum class Kind { kRank, kAllEqual, kMin, kMedian, kMax };
  Kind kind = Kind::kRank;
  int32_t rank = -1;            // the rank of a kRank line; -1 otherwise
  QString name;                 // legend and hover name ("rank 2", "all 4 ranks equal", ...)
  std::vector<QPointF> points;  // (step, value), step ascending
};

// The distinct ranks of `rows`, ascending.
std::vector<int32_t> stepRanks(const std::vector<storage::StepRow>& rows);

// The lines of metric `value` (e.g. a row's loss) over `rows` (any order, any ranks) for
// `choice`. With one rank in `rows` the single line has an empty name. kOne for a rank without
// rows gives no line. A band's median of an even count is the mean of the two middle values.
// Lines are in rank order, or min, median, max; each line's points are in step order.
std::vector<RankLine> rankLines(const std::vector<storage::StepRow>& rows,
                                const std::function<double(const storage::StepRow&)>& value,
                                RankChoice choice);

// The same lines from points already split by rank: `byRank` maps a rank to its (step, value)
// points in step order (e.g. the memory account per rank).
std::vector<RankLine> rankLines(std::map<int32_t, std::vector<QPointF>> byRank,
                                RankChoice choice);

}  // namespace moewb::gui
