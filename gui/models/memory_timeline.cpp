// Device-memory timeline: per-pixel resampling and stacking of the reader's memory series.
#include "moewb/gui/memory_timeline.h"

#include <algorithm>
#include <cmath>

#include "moewb/base/units.h"

namespace moewb::gui {

int memoryCategoryOrder(const std::string& category) {
  static const char* kOrder[] = {"weights", "grads", "optimizer", "activations", "workspace"};
  for (int i = 0; i < 5; ++i) {
    if (category == kOrder[i]) return i;
  }
  return 5;
}

namespace {

// Max level of one series per column (see stackMemorySeries).
std::vector<int64_t> resample(const std::vector<storage::MemoryPoint>& points,
                              const TimelineGeometry& g, int columns) {
  std::vector<int64_t> out(size_t(columns), 0);
  size_t i = 0;
  int64_t level = 0;
  // Points before the window only set the level carried into the first column.
  while (i < points.size() && points[i].tsNs < g.startNs) level = points[i++].bytes;
  for (int c = 0; c < columns; ++c) {
    const double endNs = g.timeAt(double(c + 1));
    int64_t value = level;
    while (i < points.size() && double(points[i].tsNs) < endNs) {
      level = points[i++].bytes;
      value = std::max(value, level);
    }
    out[size_t(c)] = value;
  }
  return out;
}

}  // namespace

std::vector<MemoryStack> stackMemorySeries(const std::vector<storage::MemorySeries>& series,
                                           const TimelineGeometry& g) {
  const int columns = std::max(1, int(std::ceil(g.widthPx)));
  std::vector<MemoryStack> stacks;
  std::vector<std::vector<const storage::MemorySeries*>> members;
  for (const storage::MemorySeries& s : series) {
    auto it = std::find_if(stacks.begin(), stacks.end(),
                           [&](const MemoryStack& m) { return m.track == s.track; });
    if (it == stacks.end()) {
      stacks.push_back({});
      stacks.back().track = s.track;
      members.emplace_back();
      it = stacks.end() - 1;
    }
    members[size_t(it - stacks.begin())].push_back(&s);
  }
  for (size_t t = 0; t < stacks.size(); ++t) {
    auto& list = members[t];
    std::stable_sort(list.begin(), list.end(), [](const auto* a, const auto* b) {
      const int oa = memoryCategoryOrder(a->category), ob = memoryCategoryOrder(b->category);
      return oa != ob ? oa < ob : a->category < b->category;
    });
    MemoryStack& stack = stacks[t];
    std::vector<int64_t> running(size_t(columns), 0);
    for (const storage::MemorySeries* s : list) {
      stack.categories.push_back(s->category);
      stack.bytes.push_back(resample(s->points, g, columns));
      for (int c = 0; c < columns; ++c) running[size_t(c)] += stack.bytes.back()[size_t(c)];
      stack.tops.push_back(running);
    }
    stack.maxTotalBytes = running.empty() ? 0 : *std::max_element(running.begin(), running.end());
  }
  return stacks;
}

int memoryColumnAt(const MemoryStack& stack, double x) {
  if (!(x >= 0) || x >= double(stack.columns())) return -1;
  return int(std::floor(x));
}

std::vector<std::string> memoryReadout(const MemoryStack& stack, int column) {
  std::vector<std::string> lines;
  if (column < 0 || column >= stack.columns()) return lines;
  int64_t total = 0;
  for (size_t k = stack.categories.size(); k-- > 0;) {
    const int64_t bytes = stack.bytes[k][size_t(column)];
    total += bytes;
    lines.push_back(stack.categories[k] + " " + formatBytes(bytes));
  }
  lines.push_back("total " + formatBytes(total));
  return lines;
}

}  // namespace moewb::gui
