// Colours shared by the workbench's views, so one phase has one colour everywhere (timeline,
// legends, summaries) and heat maps use one perceptually ordered scale.
//
// phaseColor maps a slice name ("attention.fwd", "backward", "step") to a fixed colour per phase
// family; backward phases get a darker shade of the forward colour. Unknown names get a stable
// hashed hue. heatColor maps a value in [0, 1] onto a dark-to-bright sequential scale (similar to
// "inferno"). Pure functions, O(1), any thread.
#pragma once

#include <QColor>
#include <string_view>

namespace moewb::gui {

// Colour of slices named `name`.
QColor phaseColor(std::string_view name);

// Colour of folded runs of narrow slices.
QColor foldedColor();

// Sequential scale: t <= 0 gives the darkest colour, t >= 1 the brightest; NaN counts as 0.
QColor heatColor(double t);

// Black or white, whichever reads better on `background`.
QColor textColorOn(const QColor& background);

}  // namespace moewb::gui
