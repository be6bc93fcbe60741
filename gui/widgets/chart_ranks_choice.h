// RanksChoice: the toolbar's "Ranks" combo box for the step charts of a parallel trace: all
// ranks (a line per rank, the min / median / max band past kMaxRankLines), the band, or one rank.
// rankSeries turns a chart's RankLines into its series in one colour family (one shade per rank;
// the band's min and max dashed and paler than its median). GUI thread only.
#pragma once

#include <QComboBox>
#include <cstdint>
#include <vector>

#include "chart_view.h"
#include "moewb/gui/chart_ranks.h"

namespace moewb::gui {

class RanksChoice : public QComboBox {
  Q_OBJECT

 public:
  explicit RanksChoice(QWidget* parent = nullptr);

  // Lists "all ranks", "min / median / max" and one entry per rank of `ranks` (ascending). Keeps
  // the current choice when it is still offered, else goes back to all ranks. Emits nothing (the
  // caller redraws with the new ranks).
  void setRanks(const std::vector<int32_t>& ranks);
  const std::vector<int32_t>& ranks() const { return m_ranks; }
  // The choice selected now.
  RankChoice choice() const;
  // Selects `choice` (one rank: only a listed rank, else all ranks); returns whether it is
  // offered. Emits choiceChanged when the selection changes.
  bool setChoice(RankChoice choice);

 signals:
  void choiceChanged();

 private:
  std::vector<int32_t> m_ranks;
};

// The chart series of `lines` in the colour family of `base`.
std::vector<ChartSeries> rankSeries(std::vector<RankLine> lines, const QColor& base);

}  // namespace moewb::gui
