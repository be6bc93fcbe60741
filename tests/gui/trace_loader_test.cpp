// Loading off the GUI thread: loadTrace's chunks (order, bounds, names, progress), cancelling, the
// document's beginOpen (the same models as open(), progress to 100 %, cancel leaves it closed,
// errors leave the previous document) and plain-language error text.
#include "moewb/gui/trace_loader.h"

#include <gtest/gtest.h>

#include <QDir>
#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <fstream>

#include "model_check.h"
#include "moewb/gui/trace_document.h"
#include "test_trace.h"

namespace moewb::gui {
namespace {

using testing::TestTrace;

class TraceLoaderTest : public ::testing::Test {
 protected:
  // A finished trace of `steps` steps (2 layers x 4 experts) at `name`.
  std::string makeTrace(const char* name, int steps) {
    const std::string file = m_dir.filePath(name).toStdString();
    auto trace = TestTrace::create(file, 2, 4);
    EXPECT_TRUE(trace.isOk()) << trace.status().toString();
    for (int s = 0; s < steps; ++s) EXPECT_TRUE(trace.value()->addStep(s).isOk());
    m_perStep = trace.value()->slicesPerStep();
    EXPECT_TRUE(trace.value()->finish().isOk());
    return file;
  }
  QTemporaryDir m_dir;
  int64_t m_perStep = 0;
};

TEST_F(TraceLoaderTest, ChunksComeHeaderFirstBoundedAndInStartOrder) {
  const std::string file = makeTrace("chunks.sqlite", 30);
  TraceLoadOptions options;
  options.slicesPerChunk = 100;
  options.stepsPerExpertChunk = 7;
  std::atomic<bool> cancel{false};
  std::vector<double> progress;
  int headers = 0, expertChunks = 0;
  int64_t slices = 0, loads = 0, lastStart = std::numeric_limits<int64_t>::min();
  int64_t lastLoadStep = -1;
  size_t names = 0;
  auto reader = loadTrace(
      file,
      [&](TraceChunk&& c) {
        if (c.header) {
          ++headers;
          EXPECT_EQ(progress.size(), 0u) << "the header comes first";
          EXPECT_EQ(c.header->steps.size(), 30u);
          EXPECT_EQ(c.header->bounds.endNs - c.header->bounds.startNs, 30 * TestTrace::kStepNs);
        }
        if (!c.expertLoads.empty()) {
          // Read beside the slices (their chunks interleave), in step order themselves.
          ++expertChunks;
          EXPECT_LE(c.expertLoads.size(), size_t(7 * 2 * 4));
          EXPECT_GT(c.expertLoads.front().step, lastLoadStep);
          for (const auto& r : c.expertLoads) EXPECT_LE(r.step, c.expertLoadsToStep);
          lastLoadStep = c.expertLoadsToStep;
        }
        EXPECT_LE(c.slices.size(), 100u);
        names += c.newNames.size();
        for (const auto& s : c.slices) {
          EXPECT_GE(s.startNs, lastStart);
          EXPECT_LT(size_t(s.nameIndex), names) << "a name index refers to a name already sent";
          EXPECT_LT(size_t(s.categoryIndex), names);
          lastStart = s.startNs;
        }
        slices += int64_t(c.slices.size());
        loads += int64_t(c.expertLoads.size());
        if (!progress.empty()) {
          EXPECT_GE(c.progress, progress.back());
        }
        progress.push_back(c.progress);
        return true;
      },
      cancel, options);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  EXPECT_EQ(headers, 1);
  EXPECT_EQ(expertChunks, 5);  // 30 steps, 7 at a time
  EXPECT_EQ(loads, 30 * 2 * 4);
  EXPECT_EQ(slices, 30 * m_perStep);
  ASSERT_FALSE(progress.empty());
  EXPECT_DOUBLE_EQ(progress.back(), 1.0);
}

TEST_F(TraceLoaderTest, ALoadLeavesNothingBesideTheTraceButItsSummary) {
  // The load's extra connections (bulk slices, expert loads) only read: the trace's directory
  // holds the same files, byte-identical trace included, before and after, except the summary
  // sidecar (timeline_summary.h) when the load may keep one.
  const std::string file = makeTrace("quiet.sqlite", 6);
  const QDir dir(m_dir.path());
  const QStringList before = dir.entryList(QDir::Files | QDir::Hidden, QDir::Name);
  QFile in(QString::fromStdString(file));
  ASSERT_TRUE(in.open(QIODevice::ReadOnly));
  const QByteArray bytes = in.readAll();
  in.close();
  std::atomic<bool> cancel{false};
  TraceLoadOptions noSidecar;
  noSidecar.summaryFile = false;
  auto reader = loadTrace(file, [](TraceChunk&&) { return true; }, cancel, noSidecar);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  reader.value().reset();
  EXPECT_EQ(dir.entryList(QDir::Files | QDir::Hidden, QDir::Name), before);
  reader = loadTrace(file, [](TraceChunk&&) { return true; }, cancel);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  reader.value().reset();
  EXPECT_EQ(dir.entryList(QDir::Files | QDir::Hidden, QDir::Name),
            before + QStringList{QStringLiteral("quiet.sqlite.summary")});
  ASSERT_TRUE(in.open(QIODevice::ReadOnly));
  EXPECT_EQ(in.readAll(), bytes);
}

TEST_F(TraceLoaderTest, CancelStopsTheLoad) {
  const std::string file = makeTrace("cancel.sqlite", 20);
  TraceLoadOptions options;
  options.slicesPerChunk = 50;
  std::atomic<bool> cancel{false};
  int chunks = 0;
  auto reader = loadTrace(
      file,
      [&](TraceChunk&&) {
        if (++chunks == 3) cancel = true;
        return true;
      },
      cancel, options);
  ASSERT_FALSE(reader.isOk());
  EXPECT_EQ(reader.status().code(), StatusCode::kCancelled);
  EXPECT_LE(chunks, 4);
}

TEST_F(TraceLoaderTest, BeginOpenStreamsTheSameModelsAsOpen) {
  const std::string file = makeTrace("async.sqlite", 40);
  TraceDocument sync;
  ASSERT_TRUE(sync.open(QString::fromStdString(file)).isOk());

  TraceDocument doc;
  TraceLoadOptions options;
  options.slicesPerChunk = 64;
  options.stepsPerExpertChunk = 5;
  doc.setLoadOptions(options);
  testing::ModelCheck stepCheck(doc.stepModel());
  testing::ModelCheck phaseCheck(doc.phaseSummaryModel());
  QSignalSpy opening(&doc, &TraceDocument::opening);
  QSignalSpy progress(&doc, &TraceDocument::loadProgress);
  QSignalSpy opened(&doc, &TraceDocument::opened);
  doc.beginOpen(QString::fromStdString(file));
  EXPECT_TRUE(doc.isLoading());
  EXPECT_EQ(doc.timeline().sliceCount(), 0) << "beginOpen returns before loading";
  ASSERT_TRUE(opened.wait(30'000));
  EXPECT_FALSE(doc.isLoading());
  EXPECT_EQ(opening.count(), 1);
  ASSERT_GE(progress.count(), 2);
  double last = 0;
  for (const auto& args : progress) {
    EXPECT_GE(args.at(0).toDouble(), last);
    last = args.at(0).toDouble();
  }
  EXPECT_DOUBLE_EQ(last, 1.0);
  EXPECT_TRUE(doc.lastLoadStatus().isOk());

  EXPECT_EQ(doc.stepModel()->rowCount(), sync.stepModel()->rowCount());
  EXPECT_EQ(doc.timeline().sliceCount(), sync.timeline().sliceCount());
  EXPECT_EQ(doc.timeline().lanes().size(), sync.timeline().lanes().size());
  EXPECT_EQ(doc.timeBounds(), sync.timeBounds());
  EXPECT_EQ(doc.phaseSummaryModel()->rowCount(), sync.phaseSummaryModel()->rowCount());
  EXPECT_EQ(doc.phaseSummaryModel()->referenceNs(), sync.phaseSummaryModel()->referenceNs());
  EXPECT_EQ(doc.expertLoadModel()->steps(), sync.expertLoadModel()->steps());
  EXPECT_EQ(doc.expertLoadModel()->step(), 39);
  // The join-free load holds what the row query (names joined in SQL) gives, slice by slice.
  auto reader = storage::TraceReader::open(file);
  ASSERT_TRUE(reader.isOk());
  auto rows = (*reader)->slices(storage::TimeWindow::all());
  ASSERT_TRUE(rows.isOk());
  TimelineData reference;
  reference.addSlices(*rows);
  ASSERT_EQ(doc.timeline().lanes().size(), reference.lanes().size());
  for (size_t l = 0; l < reference.lanes().size(); ++l) {
    const TimelineLane& want = reference.lanes()[l];
    const TimelineLane& got = doc.timeline().lanes()[l];
    ASSERT_EQ(got.slices.size(), want.slices.size());
    EXPECT_EQ(got.track, want.track);
    EXPECT_EQ(got.depth, want.depth);
    for (size_t i = 0; i < want.slices.size(); ++i) {
      EXPECT_EQ(got.slices[i].startNs, want.slices[i].startNs);
      EXPECT_EQ(got.slices[i].durNs, want.slices[i].durNs);
      EXPECT_EQ(got.slices[i].layer, want.slices[i].layer);
      EXPECT_EQ(doc.timeline().name(got.slices[i].nameId),
                reference.name(want.slices[i].nameId));
    }
  }
  PhaseSummaryModel phases;
  phases.addSlices(*rows);
  ASSERT_EQ(phases.entries().size(), doc.phaseSummaryModel()->entries().size());
  EXPECT_EQ(phases.referenceNs(), doc.phaseSummaryModel()->referenceNs());
  for (const auto& e : phases.entries()) {
    bool found = false;
    for (const auto& f : doc.phaseSummaryModel()->entries()) {
      if (f.name != e.name) continue;
      found = true;
      EXPECT_EQ(f.category, e.category);
      EXPECT_EQ(f.count, e.count);
      EXPECT_EQ(f.totalNs, e.totalNs);
    }
    EXPECT_TRUE(found) << e.name;
  }
  EXPECT_TRUE(stepCheck.failures().isEmpty()) << stepCheck.failures().join('\n').toStdString();
  EXPECT_TRUE(phaseCheck.failures().isEmpty()) << phaseCheck.failures().join('\n').toStdString();
  // The reader is the document's now: a refresh works and finds nothing new.
  QSignalSpy refreshed(&doc, &TraceDocument::refreshed);
  EXPECT_TRUE(doc.refresh().isOk());
  EXPECT_EQ(refreshed.count(), 0);
}

TEST_F(TraceLoaderTest, CancelDuringASlowLoadLeavesTheDocumentClosed) {
  const std::string file = makeTrace("slow.sqlite", 40);
  TraceDocument doc;
  TraceLoadOptions options;
  options.slicesPerChunk = 16;
  options.sliceChunkDelay = std::chrono::milliseconds(20);  // ~115 chunks: over 2 s
  doc.setLoadOptions(options);
  QSignalSpy opening(&doc, &TraceDocument::opening);
  QSignalSpy canceled(&doc, &TraceDocument::loadCanceled);
  QSignalSpy opened(&doc, &TraceDocument::opened);
  doc.beginOpen(QString::fromStdString(file));
  ASSERT_TRUE(opening.wait(10'000));
  QSignalSpy refreshed(&doc, &TraceDocument::refreshed);
  ASSERT_TRUE(refreshed.wait(10'000));
  EXPECT_TRUE(doc.isOpen());
  EXPECT_GT(doc.timeline().sliceCount(), 0);
  EXPECT_LT(doc.timeline().sliceCount(), 40 * m_perStep);
  doc.cancelLoad();
  EXPECT_EQ(canceled.count(), 1);
  EXPECT_FALSE(doc.isLoading());
  EXPECT_FALSE(doc.isOpen());
  EXPECT_EQ(doc.timeline().sliceCount(), 0);
  EXPECT_EQ(doc.stepModel()->rowCount(), 0);
  EXPECT_EQ(doc.phaseSummaryModel()->rowCount(), 0);
  EXPECT_EQ(doc.lastLoadStatus().code(), StatusCode::kCancelled);
  EXPECT_EQ(opened.count(), 0);
  // Usable afterwards.
  doc.setLoadOptions({});
  ASSERT_TRUE(doc.open(QString::fromStdString(file)).isOk());
  EXPECT_EQ(doc.timeline().sliceCount(), 40 * m_perStep);
}

TEST_F(TraceLoaderTest, ABadFileFailsAndKeepsThePreviousDocument) {
  const std::string good = makeTrace("good.sqlite", 2);
  const std::string junk = m_dir.filePath("junk.sqlite").toStdString();
  {
    std::ofstream out(junk);
    out << "this is not an SQLite database, just some text that a user picked by mistake\n";
  }
  TraceDocument doc;
  ASSERT_TRUE(doc.open(QString::fromStdString(good)).isOk());
  QSignalSpy failed(&doc, &TraceDocument::failed);
  doc.beginOpen(QString::fromStdString(junk));
  ASSERT_TRUE(failed.wait(10'000));
  EXPECT_FALSE(doc.isLoading());
  EXPECT_TRUE(doc.isOpen());
  EXPECT_EQ(doc.path(), QString::fromStdString(good));
  EXPECT_EQ(doc.stepModel()->rowCount(), 2);
  const QString message = failed.at(0).at(0).toString();
  EXPECT_TRUE(message.contains(QStringLiteral("junk.sqlite"))) << message.toStdString();
  EXPECT_FALSE(message.startsWith(QStringLiteral("data loss"))) << message.toStdString();
  EXPECT_FALSE(doc.lastLoadStatus().isOk());
}

TEST(UserMessage, DropsTheCodeNameAndSourceLocations) {
  EXPECT_EQ(userMessage(Status::ok()), QString());
  EXPECT_EQ(userMessage(dataLoss("/tmp/x.sqlite is truncated or corrupt")),
            QStringLiteral("/tmp/x.sqlite is truncated or corrupt"));
  EXPECT_EQ(userMessage(dataLoss("data loss: the file is damaged")),
            QStringLiteral("The file is damaged"));
  EXPECT_EQ(userMessage(internalError(
                "reading a.sqlite failed [sqlite3_step failed at sqlite_util.cpp:238, SQLite "
                "code 11]")),
            QStringLiteral("Reading a.sqlite failed"));
  EXPECT_EQ(userMessage(internalError("cannot write b.sqlite (sqlite_trace_writer.cpp:502)")),
            QStringLiteral("Cannot write b.sqlite"));
  EXPECT_EQ(userMessage(internalError("check failed at engine/foo.cpp:12")),
            QStringLiteral("Check failed"));
  const QString plain = userMessage(notFound("trace file not found: /data/run.sqlite"));
  EXPECT_EQ(plain, QStringLiteral("Trace file not found: /data/run.sqlite"));
}

}  // namespace
}  // namespace moewb::gui
