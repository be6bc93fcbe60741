// TimelineSearch: name matching, match lists, next/previous (see timeline_search.h).
#include "moewb/gui/timeline_search.h"

#include <algorithm>

namespace moewb::gui {

void TimelineSearch::clear() {
  m_text.clear();
  m_matches.clear();
  m_perLane.clear();
  m_current = -1;
}

void TimelineSearch::run(const TimelineData& data, const QString& text) {
  clear();
  m_text = text;
  m_revision = data.revision();
  if (text.isEmpty()) return;
  const auto& names = data.names();
  std::vector<char> hit(names.size(), 0);
  bool any = false;
  for (size_t id = 0; id < names.size(); ++id) {
    hit[id] = QString::fromStdString(names[id]).contains(text, Qt::CaseInsensitive) ? 1 : 0;
    any = any || hit[id];
  }
  const auto& lanes = data.lanes();
  m_perLane.resize(lanes.size());
  if (!any) return;
  for (size_t lane = 0; lane < lanes.size(); ++lane) {
    const auto& slices = lanes[lane].slices;
    for (size_t i = 0; i < slices.size(); ++i) {
      if (!hit[size_t(slices[i].nameId)]) continue;
      m_perLane[lane].push_back(int32_t(i));
      m_matches.push_back({int32_t(lane), int32_t(i), slices[i].startNs});
    }
  }
  std::sort(m_matches.begin(), m_matches.end(), [](const SearchMatch& a, const SearchMatch& b) {
    if (a.startNs != b.startNs) return a.startNs < b.startNs;
    return a.lane != b.lane ? a.lane < b.lane : a.index < b.index;
  });
}

const std::vector<int32_t>& TimelineSearch::laneMatches(size_t lane) const {
  static const std::vector<int32_t> kNone;
  return lane < m_perLane.size() ? m_perLane[lane] : kNone;
}

void TimelineSearch::setCurrent(int index) {
  m_current = index >= 0 && size_t(index) < m_matches.size() ? index : -1;
}

int TimelineSearch::step(bool forward, int64_t fromNs) {
  const int n = int(m_matches.size());
  if (n == 0) {
    m_current = -1;
    return -1;
  }
  if (m_current >= 0) {
    m_current = forward ? (m_current + 1) % n : (m_current + n - 1) % n;
    return m_current;
  }
  auto at = std::lower_bound(m_matches.begin(), m_matches.end(), fromNs,
                             [](const SearchMatch& m, int64_t t) { return m.startNs < t; });
  const int index = int(at - m_matches.begin());
  if (forward) {
    m_current = index < n ? index : 0;
  } else {
    m_current = index > 0 ? index - 1 : n - 1;
  }
  return m_current;
}

bool TimelineSearch::isMatch(size_t lane, int32_t index) const {
  const auto& v = laneMatches(lane);
  return std::binary_search(v.begin(), v.end(), index);
}

}  // namespace moewb::gui
