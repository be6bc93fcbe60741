// The workbench's look: one dark theme (Fusion style + palette) and the colours the custom-painted
// views (timeline, heat map, charts) use, so every surface matches. Cheap accessors; GUI thread.
#pragma once

#include <QColor>

class QApplication;

namespace moewb::gui::theme {

// Sets the Fusion style and the dark palette on `app`.
void apply(QApplication& app);

QColor window();       // window and panel background
QColor base();         // plot background of the views
QColor alternate();    // alternating lanes / rows
QColor gridLine();     // faint grid and tick lines
QColor axisLine();     // axes and separators
QColor text();         // primary text
QColor dimText();      // secondary text (tick labels, hints)
QColor accent();       // selection and highlights
QColor marker();       // config-change markers (timeline and charts)
QColor bookmark();     // bookmark lines and flags on the timeline (distinct from marker())
QColor series(int i);  // line-chart series colours

}  // namespace moewb::gui::theme
