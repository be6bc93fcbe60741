// Bookmark flags: where the timeline draws the user's bookmarks (bookmark_model.h). Each bookmark
// whose time lies in the window gets a thin vertical line over all lanes at its start and a small
// flag at the top of the ruler carrying its name; a range bookmark also gets a bar in the ruler
// from its start to its end. Flags never overlap: a name is cut to the room before the next
// flag (and to maxLabelPx), and dropped when less than kMinLabelPx is left, leaving the pennant.
//
// Pure functions, like config_markers.h: no widgets, no I/O. Costs: bookmarkFlags
// O(n log n) for n bookmarks; bookmarkFlagAt O(m) for the m flags of the window.
#pragma once

#include <QString>
#include <functional>
#include <vector>

#include "moewb/gui/bookmark_model.h"
#include "moewb/gui/timeline_geometry.h"

namespace moewb::gui {

struct BookmarkFlag {
  int row = 0;         // index into the bookmarks
  double x = 0;        // plot px of the bookmark's start (its line and the flag's pole)
  double endX = 0;     // plot px of its end (== x for a point), clamped to the window
  double widthPx = 0;  // the flag's width from x: the pennant, or the name's box
  QString label;       // the name as drawn (cut to fit; "" when only the pennant fits)
};

// Width of a flag without a name, and the least room a name is drawn in.
inline constexpr double kBookmarkPennantPx = 9;
inline constexpr double kBookmarkMinLabelPx = 24;
// Padding around a drawn name inside its flag.
inline constexpr double kBookmarkLabelPadPx = 4;

// Flags of `bookmarks` whose startNs lies in g's window [startNs, endNs), sorted by x (ties: row
// order). `textWidthPx` measures a string as drawn; `elide(text, px)` cuts it to `px` pixels
// ("" when nothing fits). A name takes at most maxLabelPx and ends 2 px before the next flag.
std::vector<BookmarkFlag> bookmarkFlags(const std::vector<Bookmark>& bookmarks,
                                        const TimelineGeometry& g,
                                        const std::function<double(const QString&)>& textWidthPx,
                                        const std::function<QString(const QString&, double)>& elide,
                                        double maxLabelPx = 160);

// Index into `flags` (sorted by x) of the flag whose box [x - 2, x + widthPx] holds plot x `x`;
// the rightmost when several do; -1 when none.
int bookmarkFlagAt(const std::vector<BookmarkFlag>& flags, double x);

}  // namespace moewb::gui
