// Bookmark flags (bookmark_flags.h): which bookmarks of a window get a flag, where, how their
// names are cut to the room before the next flag, and the hit test of a flag's box.
#include <gtest/gtest.h>

#include "moewb/gui/bookmark_flags.h"

namespace moewb::gui {
namespace {

// 6 px per character; elide keeps whole characters and ends in '~'.
double width(const QString& text) {
  return 6.0 * double(text.size());
}
QString elide(const QString& text, double px) {
  const int keep = int(px / 6.0) - 1;
  return keep < 1 ? QString() : text.left(keep) + QLatin1Char('~');
}

Bookmark mark(const char* name, int64_t startNs, int64_t endNs) {
  Bookmark b;
  b.name = QString::fromLatin1(name);
  b.startNs = startNs;
  b.endNs = endNs;
  return b;
}

TEST(BookmarkFlags, OnlyTheWindowsBookmarksSortedWithNamesCutToTheirRoom) {
  // Window [1000, 2000) ns over 1000 px: 1 px per ns.
  TimelineGeometry g;
  g.startNs = 1000;
  g.endNs = 2000;
  g.widthPx = 1000;
  const std::vector<Bookmark> marks = {
      mark("late", 1900, 1900),                         // 0: x 900, 98 px to the edge
      mark("before", 900, 1200),                        // 1: starts before the window
      mark("a long name for a slow step", 1100, 1300),  // 2: x 100, a range to x 300
      mark("tight", 1130, 1130),                        // 3: x 130
      mark("at end", 2000, 2000),                       // 4: at endNs: the next window's
  };
  const auto flags = bookmarkFlags(marks, g, width, elide, 160);
  ASSERT_EQ(flags.size(), 3u);
  EXPECT_EQ(flags[0].row, 2);
  EXPECT_DOUBLE_EQ(flags[0].x, 100);
  EXPECT_DOUBLE_EQ(flags[0].endX, 300);
  // 30 px to "tight" less 2: 28 px, 20 px for text after the padding: under the 24 px minimum.
  EXPECT_TRUE(flags[0].label.isEmpty());
  EXPECT_DOUBLE_EQ(flags[0].widthPx, kBookmarkPennantPx);
  EXPECT_EQ(flags[1].row, 3);
  EXPECT_DOUBLE_EQ(flags[1].x, 130);
  EXPECT_EQ(flags[1].label, QStringLiteral("tight"));  // 30 px of text fits 160 - 8
  EXPECT_DOUBLE_EQ(flags[1].widthPx, 30 + 2 * kBookmarkLabelPadPx);
  EXPECT_DOUBLE_EQ(flags[1].endX, flags[1].x);  // a point
  EXPECT_EQ(flags[2].row, 0);
  EXPECT_EQ(flags[2].label, QStringLiteral("late"));
  // A long name is cut at maxLabelPx.
  const auto alone = bookmarkFlags({marks[2]}, g, width, elide, 60);
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(alone[0].label, QStringLiteral("a long ~"));  // (60 - 8) / 6 - 1 = 7 characters
  EXPECT_LE(alone[0].widthPx, 60);
  EXPECT_TRUE(bookmarkFlags({}, g, width, elide).empty());
}

TEST(BookmarkFlags, HitTestFindsTheFlagWhoseBoxHoldsX) {
  TimelineGeometry g;
  g.startNs = 0;
  g.endNs = 1000;
  g.widthPx = 1000;
  const std::vector<Bookmark> marks = {mark("first", 100, 100), mark("second", 400, 400),
                                       mark("third", 404, 404)};
  const auto flags = bookmarkFlags(marks, g, width, elide);
  ASSERT_EQ(flags.size(), 3u);
  EXPECT_EQ(bookmarkFlagAt(flags, 100), 0);
  EXPECT_EQ(bookmarkFlagAt(flags, 98), 0);                    // 2 px left of the pole
  EXPECT_EQ(bookmarkFlagAt(flags, 100 + flags[0].widthPx), 0);
  EXPECT_EQ(bookmarkFlagAt(flags, 101 + flags[0].widthPx), -1);
  EXPECT_EQ(bookmarkFlagAt(flags, 97), -1);
  EXPECT_TRUE(flags[1].label.isEmpty());  // 2 px to the next pole: a pennant
  EXPECT_EQ(bookmarkFlagAt(flags, 401), 1);
  EXPECT_EQ(bookmarkFlagAt(flags, 405), 2);  // both boxes hold it: the rightmost
  EXPECT_EQ(bookmarkFlagAt(flags, 430), 2);  // inside "third"'s name
  EXPECT_EQ(bookmarkFlagAt({}, 10), -1);
}

}  // namespace
}  // namespace moewb::gui
