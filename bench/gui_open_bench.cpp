// GUI open and frame times on a large trace (issue 18; a plain timing program, not a test).
//
//   gui_open_bench [--slices N] [--trace PATH] [--keep] [--fresh-summary]
//
// Builds (once; reused when PATH exists) a schema-valid trace shaped like samples/configs/
// small.toml's: per step 48 slices (step, forward/backward/optimizer, embedding, per layer of the
// KKKS pattern kda or sparse_attention, router, permute, experts, combine, forward and backward,
// the loss), 64 expert-load rows (4 layers x 16 experts), the 7 counters small.toml writes (lr,
// grad_norm, memory.*) and a step row; N slices in all (default 1M, so 1M/48 steps). The trace is
// written by storage::TraceWriter in a child process, so its memory does not count below.
// Then, offscreen (QT_QPA_PLATFORM=offscreen unless set), it opens the trace in a MainWindow of
// 1600x1000 as a user would (File>Open = MainWindow::beginOpen) and prints one line per figure:
//   first_paint_ms      beginOpen -> the first paint of the status bar's progress bar
//   first_data_ms       beginOpen -> the first paint after the file proved readable
//   loaded_ms           beginOpen -> TraceDocument::opened (everything in the models), and the
//                       process's CPU time (user + system, all threads) over the same span
//   max_stall_ms        longest gap of a 5 ms GUI-thread timer during the load (responsiveness)
//   peak_rss_mib        the process's peak resident set (getrusage) and its ratio to the file
//   zoom_frame_ms       median and max of 40 zoom/pan steps of the timeline, each a synchronous
//                       repaint (draw-list rebuild + paint)
//   chart_hover_ms      median and max of 40 mouse moves over the loss chart, each with repaint
//   summary             whether the timeline's per-level summary came from the sidecar
//                       "<trace>.summary" (a second open) or was built by the load (a first open;
//                       --fresh-summary removes the sidecar before opening to measure one)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <QApplication>
#include <QElapsedTimer>
#include <QMouseEvent>
#include <QProgressBar>
#include <QTimer>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "chart_view.h"
#include "child_process.h"
#include "main_window.h"
#include "moewb/gui/timeline_summary.h"
#include "moewb/storage/trace_writer.h"
#include "theme.h"
#include "timeline_view.h"

namespace {

using moewb::storage::SliceRow;

struct Options {
  int64_t slices = 1'000'000;
  std::string trace;
  bool keep = false;
  bool freshSummary = false;  // remove "<trace>.summary" first: measure a first open
};

// One slice of the step template: name, depth, layer, start and duration in us from step start.
struct Phase {
  const char* name;
  int32_t depth;
  int32_t layer;
  int64_t startUs;
  int64_t durUs;
};

// small.toml's step (one real step of a CPU run, rounded): 48 slices.
std::vector<Phase> stepTemplate() {
  std::vector<Phase> t = {{"step", 0, -1, 0, 87'100},
                          {"forward", 1, -1, 190, 40'330},
                          {"embedding.fwd", 2, -1, 197, 39}};
  const char* mixers[] = {"kda", "kda", "kda", "sparse_attention"};
  int64_t at = 236;
  for (int l = 0; l < 4; ++l) {
    const std::string mixer = std::string(mixers[l]);
    static std::vector<std::string> names;  // keeps the c_str()s alive
    names.push_back(mixer + ".fwd");
    const int64_t durs[] = {3'000, 250, 200, 3'800, 1'300};
    const char* rest[] = {nullptr, "router.fwd", "permute.fwd", "experts.fwd", "combine.fwd"};
    for (int i = 0; i < 5; ++i) {
      t.push_back({i == 0 ? names.back().c_str() : rest[i], 2, l, at, durs[i]});
      at += durs[i] + 20;
    }
  }
  t.push_back({"loss.fwd", 2, -1, 37'780, 2'740});
  t.push_back({"backward", 1, -1, 40'520, 45'080});
  t.push_back({"loss.bwd", 2, -1, 40'521, 4'200});
  at = 44'730;
  for (int l = 3; l >= 0; --l) {
    static std::vector<std::string> names;
    names.push_back(std::string(mixers[l]) + ".bwd");
    const char* rest[] = {"combine.bwd", "experts.bwd", "permute.bwd", "router.bwd", nullptr};
    const int64_t durs[] = {280, 3'900, 170, 1'300, 4'400};
    for (int i = 0; i < 5; ++i) {
      t.push_back({i == 4 ? names.back().c_str() : rest[i], 2, l, at, durs[i]});
      at += durs[i] + 30;
    }
  }
  t.push_back({"embedding.bwd", 2, -1, 85'558, 42});
  t.push_back({"optimizer", 1, -1, 85'600, 1'500});
  return t;
}

// Writes the trace (see the header comment); returns 0 on success. Runs in a child process.
int writeTrace(const Options& o) {
  using namespace moewb::storage;
  auto created = TraceWriter::create(o.trace, {.overwrite = true});
  if (!created.isOk()) {
    std::fprintf(stderr, "%s\n", created.status().toString().c_str());
    return 1;
  }
  TraceWriter& w = **created;
  const moewb::RunId run = w.addRun({.name = "small", .backend = "cpu", .status = "running"});
  const moewb::TrackId thread = w.addTrack({.name = "trainer thread", .kind = "thread"});
  const moewb::TrackId counters = w.addTrack({.name = "counters", .kind = "counter"});
  const std::vector<Phase> phases = stepTemplate();
  const int64_t steps = std::max<int64_t>(1, o.slices / int64_t(phases.size()));
  std::mt19937_64 rng(1234);
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  int64_t t = 6'088'000'000'000;
  for (int64_t s = 0; s < steps; ++s) {
    const double scale = jitter(rng);
    for (const Phase& p : phases) {
      w.addSlice({.track = thread,
                  .startNs = t + int64_t(double(p.startUs) * 1000 * scale),
                  .durNs = int64_t(double(p.durUs) * 1000 * scale),
                  .name = p.name,
                  .category = p.depth == 0 ? kCategoryStep : kCategoryPhase,
                  .step = s,
                  .layer = p.layer,
                  .depth = p.depth});
    }
    const int64_t endNs = t + int64_t(87'100'000 * scale);
    for (int32_t l = 0; l < 4; ++l) {
      for (int32_t e = 0; e < 16; ++e) {
        w.addExpertLoad({.step = s,
                         .layer = l,
                         .expert = e,
                         .tokens = (e == 0 ? 300 : 100) + (e * 37 + l * 11 + s * 5) % 90,
                         .bias = 0.001 * double(e % 5)});
      }
    }
    const double loss = 6.9 * std::exp(-double(s) / double(steps)) + 0.1 * jitter(rng);
    const char* counterNames[] = {"lr",
                                  "grad_norm",
                                  "memory.tensor_bytes",
                                  "memory.weights_bytes",
                                  "memory.grads_bytes",
                                  "memory.optimizer_bytes",
                                  "memory.activations_bytes"};
    const double values[] = {3e-3, 0.6 * jitter(rng), 37e6, 1.2e6, 1.2e6, 2.4e6, 30e6};
    for (int c = 0; c < 7; ++c) w.addCounter({counters, counterNames[c], endNs, values[c]});
    w.addStep({.run = run,
               .step = s,
               .startNs = t,
               .endNs = endNs,
               .loss = loss,
               .auxLoss = 0.004,
               .tokens = 512,
               .tokensPerSecond = 512.0 / (double(endNs - t) * 1e-9),
               .peakBytes = 37'473'296,
               .gradNorm = values[1],
               .lr = 3e-3});
    t = endNs + 190'000;
  }
  w.finishRun(run, "completed", "", t);
  const moewb::Status closed = w.close();
  if (!closed.isOk()) {
    std::fprintf(stderr, "%s\n", closed.toString().c_str());
    return 1;
  }
  return 0;
}

// CPU time (user + system) of the whole process so far, s: with other work on the machine the
// wall-clock load time is an upper bound, this is what the load itself used.
double processCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double peakRssMiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

// Records the time of the first paint event of the watched widget after arm().
class PaintWatch : public QObject {
 public:
  void arm(const QElapsedTimer* clock) {
    m_clock = clock;
    m_ms = -1;
  }
  double ms() const { return m_ms; }

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (event->type() == QEvent::Paint && m_clock && m_ms < 0)
      m_ms = double(m_clock->nsecsElapsed()) / 1e6;
    return QObject::eventFilter(watched, event);
  }

 private:
  const QElapsedTimer* m_clock = nullptr;
  double m_ms = -1;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--slices" && i + 1 < argc) o.slices = std::stoll(argv[++i]);
    if (a == "--trace" && i + 1 < argc) o.trace = argv[++i];
    if (a == "--keep") o.keep = true;
    if (a == "--fresh-summary") o.freshSummary = true;
  }
  if (o.trace.empty()) {
    o.trace = (std::filesystem::temp_directory_path() /
               ("moewb-gui-bench-" + std::to_string(o.slices) + ".sqlite"))
                  .string();
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!std::filesystem::exists(o.trace)) {
    QElapsedTimer build;
    build.start();
    const pid_t child = fork();
    if (child == 0) _exit(writeTrace(o));
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "gui_open_bench: writing %s failed\n", o.trace.c_str());
      return 1;
    }
    std::printf("built %s in %.1f s\n", o.trace.c_str(), double(build.elapsed()) / 1000);
  }
  const double fileMiB = double(std::filesystem::file_size(o.trace)) / 1048576.0;
  const std::string sidecar = moewb::gui::summaryFilePath(o.trace);
  if (o.freshSummary) std::filesystem::remove(sidecar);
  const bool hadSidecar = std::filesystem::exists(sidecar);
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  moewb::gui::theme::apply(app);
  moewb::gui::MainWindow window;
  window.setErrorDialogsEnabled(false);
  window.resize(1600, 1000);
  window.show();
  QApplication::processEvents();
  const double baseRss = peakRssMiB();

  PaintWatch anyPaint, dataPaint;
  QElapsedTimer clock;
  double openingMs = -1, loadedMs = -1, maxStallMs = 0, maxStallAtMs = 0;
  QObject::connect(window.document(), &moewb::gui::TraceDocument::opening, &window, [&] {
    openingMs = double(clock.nsecsElapsed()) / 1e6;
    window.timelineView()->installEventFilter(&dataPaint);
    dataPaint.arm(&clock);
  });
  double cpuAtOpen = 0, loadCpuS = -1;
  QObject::connect(window.document(), &moewb::gui::TraceDocument::opened, &window, [&] {
    loadedMs = double(clock.nsecsElapsed()) / 1e6;
    loadCpuS = processCpuSeconds() - cpuAtOpen;
  });
  QTimer tick;
  tick.setInterval(5);
  QElapsedTimer sinceTick;
  QObject::connect(&tick, &QTimer::timeout, &window, [&] {
    const double gapMs = double(sinceTick.nsecsElapsed()) / 1e6;
    if (gapMs > maxStallMs) {
      maxStallMs = gapMs;
      maxStallAtMs = double(clock.nsecsElapsed()) / 1e6;
    }
    sinceTick.restart();
  });
  window.loadProgressBar()->installEventFilter(&anyPaint);
  cpuAtOpen = processCpuSeconds();
  clock.start();
  anyPaint.arm(&clock);
  window.beginOpen(QString::fromStdString(o.trace));
  window.update();
  sinceTick.start();
  tick.start();
  while (loadedMs < 0 && window.document()->lastLoadStatus().isOk()) {
    QApplication::processEvents(QEventLoop::WaitForMoreEvents, 50);
  }
  tick.stop();
  QApplication::processEvents();
  if (!window.document()->lastLoadStatus().isOk()) {
    std::fprintf(stderr, "gui_open_bench: %s\n",
                 window.document()->lastLoadStatus().toString().c_str());
    return 1;
  }
  const double rss = peakRssMiB();

  std::vector<double> windowFrames;
  for (int i = 0; i < 5; ++i) {
    QElapsedTimer f;
    f.start();
    window.repaint();
    windowFrames.push_back(double(f.nsecsElapsed()) / 1e6);
  }
  // Frames: zoom in 20 times about the middle, then pan 20 times, each repainted synchronously.
  moewb::gui::TimelineView* timeline = window.timelineView();
  std::vector<double> frames;
  for (int i = 0; i < 40; ++i) {
    QElapsedTimer f;
    f.start();
    if (i < 20) {
      timeline->zoomBy(1.5, timeline->timeGeometry().widthPx * 0.37);
    } else {
      timeline->panBy(i % 2 ? 400 : -250);
    }
    timeline->repaint();
    frames.push_back(double(f.nsecsElapsed()) / 1e6);
  }
  timeline->fitAll();
  timeline->repaint();
  moewb::gui::ChartView* chart = window.lossChart();
  std::vector<double> hovers;
  for (int i = 0; i < 40; ++i) {
    const QPointF at(70 + (chart->width() - 90) * (i + 0.5) / 40.0, chart->height() / 2.0);
    QMouseEvent move(QEvent::MouseMove, at, chart->mapToGlobal(at), Qt::NoButton, Qt::NoButton,
                     Qt::NoModifier);
    QElapsedTimer f;
    f.start();
    QApplication::sendEvent(chart, &move);
    chart->repaint();
    hovers.push_back(double(f.nsecsElapsed()) / 1e6);
  }

  auto& doc = *window.document();
  std::printf("trace %s: %.0f MiB, %lld slices, %zu steps\n", o.trace.c_str(), fileMiB,
              static_cast<long long>(doc.timeline().sliceCount()), doc.stepModel()->rows().size());
  std::printf("first_paint_ms %.1f\n", anyPaint.ms());
  std::printf("first_data_ms %.1f (file readable after %.1f ms)\n", dataPaint.ms(), openingMs);
  std::printf("loaded_ms %.1f (process CPU %.1f s, all threads)\n", loadedMs, loadCpuS);
  std::printf("max_stall_ms %.1f (ending %.0f ms after beginOpen)\n", maxStallMs, maxStallAtMs);
  std::printf("peak_rss_mib %.0f (before opening %.0f; %.2fx the file)\n", rss, baseRss,
              rss / fileMiB);
  std::printf("window_frame_ms median %.2f max %.2f\n", moewb::bench::median(windowFrames),
              *std::max_element(windowFrames.begin(), windowFrames.end()));
  std::printf("zoom_frame_ms median %.2f max %.2f\n", moewb::bench::median(frames),
              *std::max_element(frames.begin(), frames.end()));
  std::printf("chart_hover_ms median %.2f max %.2f\n", moewb::bench::median(hovers),
              *std::max_element(hovers.begin(), hovers.end()));
  const moewb::gui::TimelineSummary* summary = window.document()->timeline().summary();
  size_t buckets0 = 0;
  if (summary) {
    for (const auto& lane : summary->lanes) buckets0 += lane.levels.front().size();
  }
  std::printf("summary %s (%zu level-0 buckets of %lld us, %d levels)\n",
              !summary ? "none" : hadSidecar ? "read from the sidecar" : "built by the load",
              buckets0, summary ? (long long)(summary->bucketNs / 1000) : 0LL,
              summary ? summary->levelCount : 0);
  if (!o.keep && o.trace.find("moewb-gui-bench-") != std::string::npos) {
    std::filesystem::remove(o.trace);
    std::filesystem::remove(sidecar);
  }
  return 0;
}
