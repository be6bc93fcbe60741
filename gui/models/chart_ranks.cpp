// Per-rank lines of the step charts: split by rank, collapse equal ranks, or the min / median /
// max band (see chart_ranks.h).
#include "moewb/gui/chart_ranks.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace moewb::gui {

namespace {

using Points = std::vector<QPointF>;

// Each rank's (step, value) points in step order.
std::map<int32_t, Points> pointsByRank(
    const std::vector<storage::StepRow>& rows,
    const std::function<double(const storage::StepRow&)>& value) {
  std::map<int32_t, Points> byRank;
  for (const storage::StepRow& r : rows) byRank[r.rank].emplace_back(double(r.step), value(r));
  for (auto& [rank, points] : byRank) {
    std::stable_sort(points.begin(), points.end(),
                     [](const QPointF& a, const QPointF& b) { return a.x() < b.x(); });
  }
  return byRank;
}

bool bitwiseEqual(const Points& a, const Points& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const double ax = a[i].x(), bx = b[i].x(), ay = a[i].y(), by = b[i].y();
    if (std::memcmp(&ax, &bx, sizeof ax) != 0 || std::memcmp(&ay, &by, sizeof ay) != 0) {
      return false;
    }
  }
  return true;
}

// Per step: min, median and max over the ranks that have the step.
std::vector<RankLine> band(const std::map<int32_t, Points>& byRank) {
  std::map<double, std::vector<double>> perStep;
  for (const auto& [rank, points] : byRank) {
    for (const QPointF& p : points) perStep[p.x()].push_back(p.y());
  }
  const QString n = QString::number(byRank.size());
  std::vector<RankLine> lines(3);
  lines[0] = {RankLine::Kind::kMin, -1, QStringLiteral("min of %1 ranks").arg(n), {}};
  lines[1] = {RankLine::Kind::kMedian, -1, QStringLiteral("median"), {}};
  lines[2] = {RankLine::Kind::kMax, -1, QStringLiteral("max of %1 ranks").arg(n), {}};
  for (auto& [step, values] : perStep) {
    std::sort(values.begin(), values.end());
    const size_t k = values.size();
    const double median = k % 2 ? values[k / 2] : (values[k / 2 - 1] + values[k / 2]) / 2;
    lines[0].points.emplace_back(step, values.front());
    lines[1].points.emplace_back(step, median);
    lines[2].points.emplace_back(step, values.back());
  }
  return lines;
}

}  // namespace

std::vector<int32_t> stepRanks(const std::vector<storage::StepRow>& rows) {
  std::vector<int32_t> ranks;
  for (const storage::StepRow& r : rows) ranks.push_back(r.rank);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

std::vector<RankLine> rankLines(const std::vector<storage::StepRow>& rows,
                                const std::function<double(const storage::StepRow&)>& value,
                                RankChoice choice) {
  return rankLines(pointsByRank(rows, value), choice);
}

std::vector<RankLine> rankLines(std::map<int32_t, std::vector<QPointF>> byRank,
                                RankChoice choice) {
  std::vector<RankLine> lines;
  if (byRank.empty()) return lines;
  if (byRank.size() == 1) {
    auto& [rank, points] = *byRank.begin();
    if (choice.view == RankChoice::View::kOne && choice.rank != rank) return lines;
    lines.push_back({RankLine::Kind::kRank, rank, QString(), std::move(points)});
    return lines;
  }
  if (choice.view == RankChoice::View::kOne) {
    auto it = byRank.find(choice.rank);
    if (it == byRank.end()) return lines;
    lines.push_back({RankLine::Kind::kRank, it->first,
                     QStringLiteral("rank %1").arg(it->first), std::move(it->second)});
    return lines;
  }
  const Points& first = byRank.begin()->second;
  const bool equal = std::all_of(byRank.begin(), byRank.end(), [&](const auto& entry) {
    return bitwiseEqual(entry.second, first);
  });
  if (equal) {
    lines.push_back({RankLine::Kind::kAllEqual, -1,
                     QStringLiteral("all %1 ranks equal").arg(byRank.size()),
                     std::move(byRank.begin()->second)});
    return lines;
  }
  if (choice.view == RankChoice::View::kBand || int(byRank.size()) > kMaxRankLines) {
    return band(byRank);
  }
  for (auto& [rank, points] : byRank) {
    lines.push_back({RankLine::Kind::kRank, rank, QStringLiteral("rank %1").arg(rank),
                     std::move(points)});
  }
  return lines;
}

}  // namespace moewb::gui
