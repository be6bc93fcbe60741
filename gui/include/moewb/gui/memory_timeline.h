// MemoryStack: the device-memory timeline of one memory track resampled onto the pixel columns
// of a timeline window, ready to draw as a stacked area (bytes in use per category over time).
//
// stackMemorySeries takes the reader's downsampled series (storage::TraceReader::memorySeries,
// queried for the same window with one bucket per pixel) and gives, per track, one value per
// category and column: the largest level the category had anywhere in the column (the level
// carried in from the left, or any point inside), so a short peak stays visible however far the
// view is zoomed out. Categories are stacked in a fixed order (weights, grads, optimizer,
// activations, workspace, then others by name); tops[k][c] is the top edge of band k. Before a
// series' first point its level is 0. memoryReadout describes one column for the hover text.
// Pure value computations, O(series points + categories * columns); no Qt, any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moewb/base/ids.h"
#include "moewb/gui/timeline_geometry.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::gui {

struct MemoryStack {
  TrackId track;                            // the memory track (one rank's device)
  std::vector<std::string> categories;      // bottom to top
  std::vector<std::vector<int64_t>> bytes;  // [category][column] bytes in use (max in column)
  std::vector<std::vector<int64_t>> tops;   // [category][column] top of the band, bytes
  int64_t maxTotalBytes = 0;                // largest column total

  int columns() const { return bytes.empty() ? 0 : int(bytes.front().size()); }
};

// Stacking position of `category`: weights 0, grads 1, optimizer 2, activations 3, workspace 4,
// anything else 5 (ties broken by name).
int memoryCategoryOrder(const std::string& category);

// Resamples `series` (any number of tracks, as memorySeries returns them) onto the
// ceil(g.widthPx) columns of `g`; column c covers [g.timeAt(c), g.timeAt(c + 1)). One stack per
// track, in order of first appearance.
std::vector<MemoryStack> stackMemorySeries(const std::vector<storage::MemorySeries>& series,
                                           const TimelineGeometry& g);

// Column of plot x in `stack` (floor), or -1 outside [0, columns).
int memoryColumnAt(const MemoryStack& stack, double x);

// One line per category from the top band down ("activations 4.00 MiB") and a last line with
// the total ("total 13.0 MiB"); empty for a bad column.
std::vector<std::string> memoryReadout(const MemoryStack& stack, int column);

}  // namespace moewb::gui
