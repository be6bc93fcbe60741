// Bookmark flags: laying the bookmarks of a window out in the ruler (see bookmark_flags.h).
#include "moewb/gui/bookmark_flags.h"

#include <algorithm>

namespace moewb::gui {

std::vector<BookmarkFlag> bookmarkFlags(const std::vector<Bookmark>& bookmarks,
                                        const TimelineGeometry& g,
                                        const std::function<double(const QString&)>& textWidthPx,
                                        const std::function<QString(const QString&, double)>& elide,
                                        double maxLabelPx) {
  std::vector<BookmarkFlag> flags;
  for (size_t i = 0; i < bookmarks.size(); ++i) {
    const Bookmark& b = bookmarks[i];
    if (b.startNs < g.startNs || b.startNs >= g.endNs) continue;
    BookmarkFlag f;
    f.row = int(i);
    f.x = g.xOf(b.startNs);
    f.endX = std::clamp(g.xOf(std::max(b.endNs, b.startNs)), f.x, g.widthPx);
    flags.push_back(f);
  }
  std::stable_sort(flags.begin(), flags.end(),
                   [](const BookmarkFlag& a, const BookmarkFlag& b) { return a.x < b.x; });
  for (size_t k = 0; k < flags.size(); ++k) {
    BookmarkFlag& f = flags[k];
    // The room up to the next flag's pole (or the plot's right edge), less a 2 px gap.
    const double next = k + 1 < flags.size() ? flags[k + 1].x : g.widthPx;
    const double room = std::min(next - f.x - 2, maxLabelPx);
    const QString& name = bookmarks[size_t(f.row)].name;
    const double textPx = room - 2 * kBookmarkLabelPadPx;
    if (textPx >= kBookmarkMinLabelPx && !name.isEmpty()) {
      f.label = textWidthPx(name) <= textPx ? name : elide(name, textPx);
    }
    f.widthPx = f.label.isEmpty() ? kBookmarkPennantPx
                                  : textWidthPx(f.label) + 2 * kBookmarkLabelPadPx;
  }
  return flags;
}

int bookmarkFlagAt(const std::vector<BookmarkFlag>& flags, double x) {
  // A name ends before the next pole, but a pennant may run past a close neighbour's: the
  // rightmost box that holds x wins.
  for (size_t k = flags.size(); k-- > 0;) {
    if (x >= flags[k].x - 2 && x <= flags[k].x + flags[k].widthPx) return int(k);
  }
  return -1;
}

}  // namespace moewb::gui
