// RanksChoice and the rank lines' colours (see chart_ranks_choice.h).
#include "chart_ranks_choice.h"

#include <algorithm>

namespace moewb::gui {

namespace {
constexpr int kAllIndex = 0, kBandIndex = 1, kFirstRankIndex = 2;
}  // namespace

RanksChoice::RanksChoice(QWidget* parent) : QComboBox(parent) {
  setSizeAdjustPolicy(QComboBox::AdjustToContents);
  setToolTip(tr("Which ranks the step charts draw: a line per rank (the min / median / max band "
                "past %1 ranks), the band, or one rank")
                 .arg(kMaxRankLines));
  setRanks({});
  connect(this, &QComboBox::currentIndexChanged, this, &RanksChoice::choiceChanged);
}

void RanksChoice::setRanks(const std::vector<int32_t>& ranks) {
  if (ranks == m_ranks && count() > 0) return;
  const RankChoice before = choice();
  m_ranks = ranks;
  const QSignalBlocker block(this);
  clear();
  addItem(tr("all ranks"));
  addItem(tr("min / median / max"));
  for (int32_t r : m_ranks) addItem(tr("rank %1").arg(r));
  setChoice(before);
}

RankChoice RanksChoice::choice() const {
  const int i = currentIndex();
  if (i == kBandIndex) return {RankChoice::View::kBand, 0};
  if (i >= kFirstRankIndex && size_t(i - kFirstRankIndex) < m_ranks.size()) {
    return {RankChoice::View::kOne, m_ranks[size_t(i - kFirstRankIndex)]};
  }
  return {};
}

bool RanksChoice::setChoice(RankChoice choice) {
  int index = kAllIndex;
  bool offered = true;
  if (choice.view == RankChoice::View::kBand) {
    index = kBandIndex;
  } else if (choice.view == RankChoice::View::kOne) {
    auto it = std::find(m_ranks.begin(), m_ranks.end(), choice.rank);
    offered = it != m_ranks.end();
    if (offered) index = kFirstRankIndex + int(it - m_ranks.begin());
  }
  setCurrentIndex(index);
  return offered;
}

std::vector<ChartSeries> rankSeries(std::vector<RankLine> lines, const QColor& base) {
  std::vector<ChartSeries> series;
  int rankLines = 0;
  for (const RankLine& l : lines) rankLines += l.kind == RankLine::Kind::kRank ? 1 : 0;
  int rankIndex = 0;
  for (RankLine& l : lines) {
    ChartSeries s;
    s.name = l.name;
    s.color = base;
    if (l.kind == RankLine::Kind::kRank && rankLines > 1) {
      // One hue, the ranks' shades from dark to light (rank order in the legend).
      const float t = float(rankIndex++) / float(rankLines - 1);
      s.color = QColor::fromHslF(base.hslHueF(), base.hslSaturationF(), 0.35f + 0.4f * t);
    } else if (l.kind == RankLine::Kind::kMin || l.kind == RankLine::Kind::kMax) {
      s.color = base.lighter(135);
      s.dashed = true;
    }
    s.points = std::move(l.points);
    series.push_back(std::move(s));
  }
  return series;
}

}  // namespace moewb::gui
