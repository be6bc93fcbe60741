// moewb-gui: the MoE Workbench desktop app.
//   moewb-gui [FILE]                      open a trace
//   moewb-gui --run CONFIG [--out PATH] [--steps N]   train CONFIG and watch it live
//   --screenshot OUT.png                  render the window to OUT.png once the trace is loaded
//                                         (or the run finished) and exit; exit code 1 on errors
//   --window A:B                          show ms A..B after the trace start on the timeline
//   --size WxH                            window size (default 1600x1000, or the saved one)
//   --heatmap-scale MAX                   fix the expert heat map's colour scale at MAX x layer mean
//                                         (a number > 0, or auto: the data's maximum)
//   --no-saved-layout                     neither restore nor save the window layout (QSettings
//                                         "MoE Workbench/moewb-gui"); --screenshot implies it
//   --timeline-height PX                  give the timeline PX pixels (all lanes down to swap)
//   --swap-tab TAB                        show the Swap dock's tab: memory, pcie, layers, what-if
//   --select A:B                          select ms A..B after the trace start (the Selection dock)
//   --study STUDY.sqlite                  also open a `moewb tune` study in the Tuner window
//                                         (with --screenshot and no FILE: render that window)
//   --compare B.sqlite [--warmup N]       open the Compare window on FILE (A) against B instead
//                                         (with --screenshot: render it once compared, and exit)
#include <QApplication>
#include <QCommandLineParser>
#include <QDateTime>
#include <QElapsedTimer>
#include <QSize>
#include <QTimer>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "compare_window.h"
#include "heatmap_panel.h"
#include "main_window.h"
#include "theme.h"
#include "tuner_window.h"
#include "timeline_view.h"

namespace {

// Applies --window A:B (milliseconds after the first slice) to the timeline.
void applyWindow(moewb::gui::MainWindow* window, const QString& spec) {
  const QStringList parts = spec.split(QLatin1Char(':'));
  if (parts.size() != 2) return;
  const int64_t origin = window->document()->timeBounds().startNs;
  const auto ms = [](const QString& s) { return int64_t(s.toDouble() * 1e6); };
  window->timelineView()->showTimeRange({origin + ms(parts[0]), origin + ms(parts[1])});
}

struct Options {
  QString file;       // FILE to open, may be empty
  QString runConfig;  // --run
  QString runOut;     // --out
  qint64 runSteps = -1;
  QString screenshot;  // --screenshot
  QString windowSpec;  // --window
  QSize size{1600, 1000};
  bool sizeSet = false;      // --size given
  bool savedLayout = true;   // restore and save the layout (not with --no-saved-layout)
  double heatmapScale = 0;   // --heatmap-scale, 0 = auto
  int timelineHeight = 0;  // --timeline-height, 0 = default
  QString swapTab;         // --swap-tab
  QString selectSpec;      // --select
  QString study;           // --study
  QString compareWith;     // --compare
  qint64 warmupSteps = 1;  // --warmup (of --compare)
};

// Applies the layout options (--timeline-height, --swap-tab) once a trace is in.
void applyLayout(moewb::gui::MainWindow* window, const Options& o) {
  if (o.timelineHeight > 0) window->setTimelineHeight(o.timelineHeight);
  const QStringList range = o.selectSpec.split(QLatin1Char(':'));
  if (range.size() == 2) {
    const int64_t origin = window->document()->timeBounds().startNs;
    const auto ms = [](const QString& text) { return int64_t(text.toDouble() * 1e6); };
    const moewb::gui::TimeRange wanted{origin + ms(range[0]), origin + ms(range[1])};
    const auto current = window->timelineView()->selectedRange();
    // Applied at open and again before a screenshot: select once (each selection re-reads the
    // GPU rows inside it on a worker).
    if (!current || current->startNs != wanted.startNs || current->endNs != wanted.endNs) {
      window->timelineView()->setSelectedRange(wanted);
    }
  }
  if (!o.swapTab.isEmpty() && !window->showSwapTab(o.swapTab)) {
    std::fprintf(stderr, "moewb-gui: --swap-tab %s: no swap rows in the trace or not one of "
                 "memory, pcie, layers, what-if\n", qPrintable(o.swapTab));
  }
}

// Renders `window` to `path` after the event loop has laid it out, then quits with the result.
// `windowSpec` (--window) and the layout options are applied first, as a live run's trace only
// exists now.
void screenshotAndQuit(moewb::gui::MainWindow* window, const QString& path, bool ok,
                       const Options& o) {
  QTimer::singleShot(300, window, [window, path, ok, o] {
    if (!o.windowSpec.isEmpty()) applyWindow(window, o.windowSpec);
    applyLayout(window, o);
    // A selection's GPU rows are read on a worker: give them time before rendering.
    if (!o.selectSpec.isEmpty()) {
      QElapsedTimer waited;
      waited.start();
      while (waited.elapsed() < 3000) QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
    }
    const bool saved = window->saveScreenshot(path);
    if (!saved) std::fprintf(stderr, "moewb-gui: cannot write %s\n", qPrintable(path));
    if (!window->lastError().isEmpty()) {
      std::fprintf(stderr, "moewb-gui: %s\n", qPrintable(window->lastError()));
    }
    QCoreApplication::exit(saved && ok ? 0 : 1);
  });
}

// --study S --screenshot OUT without a trace: renders the Tuner window (the pick selected) to
// OUT and exits; exit code 1 when the study was refused or OUT cannot be written.
void studyScreenshotAndQuit(moewb::gui::TunerWindow* tuner, const QString& path) {
  QTimer::singleShot(300, tuner, [tuner, path] {
    const bool opened = tuner->errorText().isEmpty();
    if (!opened) std::fprintf(stderr, "moewb-gui: %s\n", qPrintable(tuner->errorText()));
    const bool saved = tuner->grab().save(path);
    if (!saved) std::fprintf(stderr, "moewb-gui: cannot write %s\n", qPrintable(path));
    QCoreApplication::exit(saved && opened ? 0 : 1);
  });
}

Options parseOptions(const QApplication& app) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      QStringLiteral("MoE Workbench: train, trace and inspect MoE runs"));
  parser.addHelpOption();
  parser.addPositionalArgument(QStringLiteral("FILE"), QStringLiteral("trace file to open"));
  QCommandLineOption runOpt(QStringLiteral("run"), QStringLiteral("train this config at start"),
                            QStringLiteral("CONFIG"));
  QCommandLineOption outOpt(QStringLiteral("out"), QStringLiteral("trace file of --run"),
                            QStringLiteral("PATH"));
  QCommandLineOption stepsOpt(QStringLiteral("steps"), QStringLiteral("steps of --run"),
                              QStringLiteral("N"), QStringLiteral("-1"));
  QCommandLineOption shotOpt(QStringLiteral("screenshot"),
                             QStringLiteral("save the window as PNG after loading, then exit"),
                             QStringLiteral("OUT.png"));
  QCommandLineOption sizeOpt(QStringLiteral("size"), QStringLiteral("window size WxH"),
                             QStringLiteral("WxH"), QStringLiteral("1600x1000"));
  QCommandLineOption windowOpt(QStringLiteral("window"),
                               QStringLiteral("timeline window in ms after the trace start"),
                               QStringLiteral("A:B"));
  QCommandLineOption heightOpt(QStringLiteral("timeline-height"),
                               QStringLiteral("timeline height in pixels"), QStringLiteral("PX"));
  QCommandLineOption swapTabOpt(QStringLiteral("swap-tab"),
                                QStringLiteral("Swap dock tab: memory, pcie, layers, what-if"),
                                QStringLiteral("TAB"));
  QCommandLineOption selectOpt(QStringLiteral("select"),
                               QStringLiteral("select ms A..B after the trace start"),
                               QStringLiteral("A:B"));
  QCommandLineOption studyOpt(QStringLiteral("study"),
                              QStringLiteral("open a moewb tune study in the Tuner window"),
                              QStringLiteral("STUDY"));
  QCommandLineOption compareOpt(QStringLiteral("compare"),
                                QStringLiteral("open the Compare window on FILE (A) against B"),
                                QStringLiteral("B"));
  QCommandLineOption warmupOpt(QStringLiteral("warmup"),
                               QStringLiteral("with --compare: first steps left out (default 1)"),
                               QStringLiteral("N"));
  QCommandLineOption noLayoutOpt(QStringLiteral("no-saved-layout"),
                                 QStringLiteral("neither restore nor save the window layout"));
  QCommandLineOption scaleOpt(QStringLiteral("heatmap-scale"),
                              QStringLiteral("fix the heat map's colour scale (x layer mean)"),
                              QStringLiteral("MAX"), QStringLiteral("auto"));
  parser.addOptions({runOpt, outOpt, stepsOpt, shotOpt, sizeOpt, windowOpt, heightOpt, swapTabOpt,
                     compareOpt, warmupOpt, selectOpt, studyOpt, noLayoutOpt, scaleOpt});
  parser.process(app);
  Options o;
  if (!parser.positionalArguments().isEmpty()) o.file = parser.positionalArguments().front();
  o.runConfig = parser.value(runOpt);
  o.runOut = parser.value(outOpt);
  if (o.runOut.isEmpty()) {
    o.runOut = QStringLiteral("runs/gui-%1.sqlite")
                   .arg(QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss")));
  }
  o.runSteps = parser.value(stepsOpt).toLongLong();
  o.screenshot = parser.value(shotOpt);
  // Screenshots stay reproducible: they never read (or write) the user's saved layout.
  o.savedLayout = !parser.isSet(noLayoutOpt) && o.screenshot.isEmpty();
  o.sizeSet = parser.isSet(sizeOpt);
  const QString scale = parser.value(scaleOpt);
  if (scale != QLatin1String("auto")) {
    bool ok = false;
    o.heatmapScale = scale.toDouble(&ok);
    if (!ok || !(o.heatmapScale > 0) || !std::isfinite(o.heatmapScale)) {
      std::fprintf(stderr, "moewb-gui: --heatmap-scale %s: expected a number > 0 (the top of the "
                   "colour scale in x layer mean, e.g. 2) or auto\n", qPrintable(scale));
      std::exit(2);
    }
  }
  o.windowSpec = parser.value(windowOpt);
  o.timelineHeight = parser.value(heightOpt).toInt();
  o.swapTab = parser.value(swapTabOpt);
  o.compareWith = parser.value(compareOpt);
  o.selectSpec = parser.value(selectOpt);
  o.study = parser.value(studyOpt);
  if (parser.isSet(warmupOpt)) o.warmupSteps = parser.value(warmupOpt).toLongLong();
  const QStringList size = parser.value(sizeOpt).split(QLatin1Char('x'));
  if (size.size() == 2 && size[0].toInt() > 0 && size[1].toInt() > 0) {
    o.size = QSize(size[0].toInt(), size[1].toInt());
  }
  return o;
}

// --compare: the Compare window on o.file (A) against o.compareWith (B); with --screenshot it
// renders the window once the comparison ended and exits (1 when it failed).
int runCompare(QApplication& app, const Options& o) {
  moewb::gui::CompareWindow window;
  window.resize(o.size);
  window.show();
  if (!o.screenshot.isEmpty()) {
    QObject::connect(&window, &moewb::gui::CompareWindow::finished, &window, [&window, o](bool ok) {
      QTimer::singleShot(300, &window, [&window, o, ok] {
        const bool saved = window.grab().save(o.screenshot);
        if (!saved) std::fprintf(stderr, "moewb-gui: cannot write %s\n", qPrintable(o.screenshot));
        if (!ok) std::fprintf(stderr, "moewb-gui: %s\n", qPrintable(window.headerText()));
        QCoreApplication::exit(saved && ok ? 0 : 1);
      });
    });
  }
  moewb::gui::CompareRequest request;
  request.pathA = o.file;
  request.pathB = o.compareWith;
  request.a.warmupSteps = o.warmupSteps;
  request.b.warmupSteps = o.warmupSteps;
  window.beginCompare(request);
  return app.exec();
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("MoE Workbench"));
  QApplication::setOrganizationName(QStringLiteral("moewb"));
  moewb::gui::theme::apply(app);
  const Options o = parseOptions(app);
  if (!o.compareWith.isEmpty()) return runCompare(app, o);

  moewb::gui::MainWindow window;
  window.resize(o.size);
  if (o.savedLayout) {
    window.useSavedLayout();
    if (o.sizeSet) window.resize(o.size);  // an explicit --size wins over the saved geometry
  }
  if (!o.screenshot.isEmpty()) window.setErrorDialogsEnabled(false);
  if (o.heatmapScale > 0) window.heatmapPanel()->setFixedScale(o.heatmapScale);
  window.show();
  moewb::gui::TunerWindow* tuner =
      o.study.isEmpty() ? nullptr : moewb::gui::openStudyWindow(o.study, &window);

  // The trace loads on a worker while the window is already up; the screenshot (without --run)
  // waits for the load to end.
  const bool shotAfterOpen = !o.file.isEmpty() && o.runConfig.isEmpty() && !o.screenshot.isEmpty();
  if (!o.file.isEmpty()) {
    QObject::connect(
        &window, &moewb::gui::MainWindow::openFinished, &window,
        [&window, o, shotAfterOpen](bool opened) {
          if (opened && !o.windowSpec.isEmpty()) applyWindow(&window, o.windowSpec);
          if (opened) applyLayout(&window, o);
          if (shotAfterOpen) screenshotAndQuit(&window, o.screenshot, opened, o);
        },
        Qt::SingleShotConnection);
    window.beginOpen(o.file);
  }
  if (!o.runConfig.isEmpty()) {
    const bool started = window.startRun(o.runConfig, o.runOut, o.runSteps).isOk();
    if (started && !o.screenshot.isEmpty()) {
      QObject::connect(&window, &moewb::gui::MainWindow::runFinished, &window,
                       [&window, o](bool runOk, const QString&) {
                         screenshotAndQuit(&window, o.screenshot, runOk, o);
                       });
    } else if (!o.screenshot.isEmpty()) {
      screenshotAndQuit(&window, o.screenshot, false, o);
    }
  } else if (tuner != nullptr && o.file.isEmpty() && !o.screenshot.isEmpty()) {
    tuner->resize(o.size);
    studyScreenshotAndQuit(tuner, o.screenshot);
  } else if (!o.screenshot.isEmpty() && !shotAfterOpen) {
    screenshotAndQuit(&window, o.screenshot, true, o);
  }
  return app.exec();
}
