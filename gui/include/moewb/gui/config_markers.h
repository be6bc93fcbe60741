// Config-change markers: where the views draw the trace's config changes. The timeline draws a
// vertical line at each change's timestamp over all lanes; the loss and step-time charts draw one
// at the step from which the new value is used. Changes that land on the same place (one patch
// of several keys, or changes closer than a few pixels) become one marker whose tooltip lists
// them all. The trainer writes one row per key of a patch, each stamped as it is written, so a
// patch's rows lie microseconds apart: the timeline keeps them together at any zoom (rows of one
// step and source, each within kPatchGapNs of the one before, are one patch).
//
// Pure functions over the change rows, like timeline_geometry.h: no Qt widgets, no I/O.
// Costs: timelineMarkers O(n log n), stepMarkers O(n log n), markerNear O(log m).
#pragma once

#include <QString>
#include <cstdint>
#include <vector>

#include "moewb/gui/timeline_geometry.h"
#include "moewb/storage/rows.h"

namespace moewb::gui {

struct ConfigMarker {
  double x = 0;           // timeline: px from the window start; charts: the step
  int64_t step = 0;       // step of the marker's first change
  int64_t tsNs = 0;       // timestamp of the marker's first change, ns
  std::vector<int> rows;  // indexes into the change rows, by time (ties in row order); never empty
};

// Longest gap between two consecutive rows of one live patch, ns.
inline constexpr int64_t kPatchGapNs = 1'000'000;

// Markers of `changes` inside g's window, one per patch or group of patches: a patch (see the file
// comment) is placed at its first change, x = g.xOf(tsNs), and shown when startNs <= tsNs < endNs
// (a change at endNs belongs to the next window); a patch within mergePx of the previous marker's
// first change joins it. Sorted by x.
std::vector<ConfigMarker> timelineMarkers(const std::vector<storage::ConfigChangeRow>& changes,
                                          const TimelineGeometry& g, double mergePx = 4.0);

// Chart markers: one per distinct step (x = step), sorted by step.
std::vector<ConfigMarker> stepMarkers(const std::vector<storage::ConfigChangeRow>& changes);

// Index of the marker whose x is nearest to `x`, if it is at most `tolerance` away; else -1.
// `markers` must be sorted by x.
int markerNear(const std::vector<ConfigMarker>& markers, double x, double tolerance);

// describeConfigChange of each of the marker's rows, one per line ('\n').
QString markerText(const ConfigMarker& marker,
                   const std::vector<storage::ConfigChangeRow>& changes);

}  // namespace moewb::gui
