// TraceDocument on real trace files: full load, incremental refresh of a growing trace (models
// stay model-tester clean while rows are appended), and errors for unreadable files.
#include "moewb/gui/trace_document.h"

#include <gtest/gtest.h>

#include <QDir>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <fstream>

#include "model_check.h"
#include "test_trace.h"

namespace moewb::gui {
namespace {

using testing::TestTrace;

class TraceDocumentTest : public ::testing::Test {
 protected:
  std::string path(const char* name) const { return m_dir.filePath(name).toStdString(); }
  QTemporaryDir m_dir;
};

TEST_F(TraceDocumentTest, OpenLoadsStepsSlicesAndExpertLoad) {
  const std::string file = path("done.sqlite");
  auto trace = TestTrace::create(file, 2, 4);
  ASSERT_TRUE(trace.isOk()) << trace.status().toString();
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(trace.value()->addStep(s).isOk());
  const int64_t perStep = trace.value()->slicesPerStep();
  ASSERT_TRUE(trace.value()->finish().isOk());

  TraceDocument doc;
  QSignalSpy opened(&doc, &TraceDocument::opened);
  Status status = doc.open(QString::fromStdString(file));
  ASSERT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(opened.count(), 1);
  ASSERT_TRUE(doc.run().has_value());
  EXPECT_EQ(doc.run()->status, "completed");
  ASSERT_EQ(doc.stepModel()->rowCount(), 3);
  EXPECT_DOUBLE_EQ(doc.stepModel()->rows()[2].loss, 5.3);
  EXPECT_EQ(doc.timeline().sliceCount(), 3 * perStep);
  EXPECT_EQ(doc.timeline().lanes().size(), 3u);  // depths 0, 1, 2 of one track
  EXPECT_EQ(doc.timeline().bounds().durNs(), 3 * TestTrace::kStepNs);

  ExpertLoadModel* load = doc.expertLoadModel();
  ASSERT_EQ(load->rowCount(), 2);
  ASSERT_EQ(load->columnCount(), 4);
  EXPECT_EQ(load->step(), 2);
  EXPECT_EQ(load->data(load->index(1, 3)).toLongLong(), TestTrace::tokensFor(2, 1, 3));
  load->setMode(ExpertLoadModel::Mode::kMaxOverSteps);
  int64_t expectMax = 0;
  for (int s = 0; s < 3; ++s) expectMax = std::max(expectMax, TestTrace::tokensFor(s, 0, 2));
  EXPECT_EQ(load->data(load->index(0, 2)).toLongLong(), expectMax);

  PhaseSummaryModel* phases = doc.phaseSummaryModel();
  EXPECT_EQ(phases->referenceNs(), 3 * TestTrace::kStepNs);
  bool sawStep = false;
  for (int r = 0; r < phases->rowCount(); ++r) {
    if (phases->entries()[size_t(r)].name != "step") continue;
    sawStep = true;
    EXPECT_EQ(phases->entries()[size_t(r)].count, 3);
    EXPECT_DOUBLE_EQ(phases->share(r), 1.0);
  }
  EXPECT_TRUE(sawStep);
}

TEST_F(TraceDocumentTest, RefreshAppendsOnlyWhatIsNew) {
  const std::string file = path("live.sqlite");
  auto created = TestTrace::create(file, 2, 3);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  TestTrace& trace = *created.value();
  ASSERT_TRUE(trace.addStep(0).isOk());
  ASSERT_TRUE(trace.addStep(1).isOk());

  TraceDocument doc;
  ASSERT_TRUE(doc.open(QString::fromStdString(file)).isOk());
  testing::ModelCheck stepCheck(doc.stepModel());
  EXPECT_EQ(doc.run()->status, "running");
  EXPECT_EQ(doc.stepModel()->rowCount(), 2);
  EXPECT_EQ(doc.timeline().sliceCount(), 2 * trace.slicesPerStep());
  const int phaseRows = doc.phaseSummaryModel()->rowCount();

  QSignalSpy refreshed(&doc, &TraceDocument::refreshed);
  ASSERT_TRUE(doc.refresh().isOk());  // nothing new
  EXPECT_EQ(refreshed.count(), 0);

  ASSERT_TRUE(trace.addStep(2).isOk());
  ASSERT_TRUE(trace.addStep(3).isOk());
  ASSERT_TRUE(doc.refresh().isOk());
  ASSERT_EQ(refreshed.count(), 1);
  EXPECT_EQ(refreshed.at(0).at(0).toInt(), 2);
  EXPECT_EQ(refreshed.at(0).at(1).toInt(), int(2 * trace.slicesPerStep()));
  EXPECT_EQ(refreshed.at(0).at(2).toInt(), 2 * 2 * 3);
  EXPECT_EQ(doc.stepModel()->rowCount(), 4);
  EXPECT_EQ(doc.timeline().sliceCount(), 4 * trace.slicesPerStep());
  EXPECT_EQ(doc.phaseSummaryModel()->rowCount(), phaseRows);  // same names, bigger totals
  EXPECT_EQ(doc.phaseSummaryModel()->referenceNs(), 4 * TestTrace::kStepNs);
  EXPECT_EQ(doc.expertLoadModel()->step(), 3);  // follows the live step
  EXPECT_EQ(doc.expertLoadModel()->steps().size(), 4u);

  ASSERT_TRUE(trace.finish().isOk());
  ASSERT_TRUE(doc.refresh().isOk());
  EXPECT_EQ(doc.run()->status, "completed");
  EXPECT_EQ(doc.timeline().sliceCount(), 4 * trace.slicesPerStep());
  EXPECT_TRUE(stepCheck.failures().isEmpty()) << stepCheck.failures().join('\n').toStdString();
}

TEST_F(TraceDocumentTest, ModelsStayConsistentDuringRefresh) {
  const std::string file = path("checked.sqlite");
  auto created = TestTrace::create(file, 3, 4);
  ASSERT_TRUE(created.isOk());
  TestTrace& trace = *created.value();
  ASSERT_TRUE(trace.addStep(0).isOk());
  TraceDocument doc;
  ASSERT_TRUE(doc.open(QString::fromStdString(file)).isOk());
  int64_t next = 1;
  for (QAbstractItemModel* model : std::initializer_list<QAbstractItemModel*>{
           doc.expertLoadModel(), doc.phaseSummaryModel(), doc.stepModel()}) {
    testing::ModelCheck check(model);
    for (int s = 0; s < 2; ++s) ASSERT_TRUE(trace.addStep(next++).isOk());
    ASSERT_TRUE(doc.refresh().isOk());
    EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
  }
  EXPECT_EQ(doc.stepModel()->rowCount(), 7);
}

TEST_F(TraceDocumentTest, ConfigChangesLoadAndGrowIncrementally) {
  const std::string file = path("changes.sqlite");
  auto created = TestTrace::create(file, 1, 2);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  TestTrace& trace = *created.value();
  ASSERT_TRUE(trace.addStep(0).isOk());
  trace.addConfigChange(1, "optim.lr", "0.0030000000000000001", "0.001");
  ASSERT_TRUE(trace.addStep(1).isOk());

  TraceDocument doc;
  ASSERT_TRUE(doc.open(QString::fromStdString(file)).isOk());
  ConfigChangeModel* changes = doc.configChangeModel();
  testing::ModelCheck check(changes);
  ASSERT_EQ(changes->rowCount(), 1);
  EXPECT_EQ(changes->rows()[0].key, "optim.lr");
  EXPECT_EQ(changes->rows()[0].step, 1);

  QSignalSpy inserted(changes, &QAbstractItemModel::rowsInserted);
  QSignalSpy reset(changes, &QAbstractItemModel::modelReset);
  trace.addConfigChange(2, "data.skew", "1.0", "2.5", "tuner");
  trace.addConfigChange(2, "optim.warmup_steps", "10", "0", "tuner");
  ASSERT_TRUE(trace.addStep(2).isOk());
  ASSERT_TRUE(doc.refresh().isOk());
  EXPECT_EQ(inserted.count(), 1);
  EXPECT_EQ(reset.count(), 0);
  ASSERT_EQ(changes->rowCount(), 3);
  EXPECT_EQ(changes->rows()[2].key, "optim.warmup_steps");
  EXPECT_EQ(changes->rows()[1].source, "tuner");

  // A change alone (no new step) still counts as news for refreshed().
  QSignalSpy refreshed(&doc, &TraceDocument::refreshed);
  trace.addConfigChange(3, "optim.eps", "1e-08", "1e-06");
  ASSERT_TRUE(trace.flush().isOk());
  ASSERT_TRUE(doc.refresh().isOk());
  ASSERT_EQ(refreshed.count(), 1);
  EXPECT_EQ(refreshed.at(0).at(0).toInt(), 0);
  EXPECT_EQ(changes->rowCount(), 4);
  ASSERT_TRUE(trace.finish().isOk());

  doc.close();
  EXPECT_EQ(changes->rowCount(), 0);
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
}

TEST_F(TraceDocumentTest, MemoryCountersLoadAndGrowIncrementally) {
  const std::string file = path("memory.sqlite");
  auto created = TestTrace::create(file, 1, 2);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  TestTrace& trace = *created.value();
  ASSERT_TRUE(trace.addStep(0).isOk());  // an older-style step without memory counters
  trace.setMemoryCounters(true);
  ASSERT_TRUE(trace.addStep(1).isOk());
  ASSERT_TRUE(trace.addStep(2).isOk());

  TraceDocument doc;
  ASSERT_TRUE(doc.open(QString::fromStdString(file)).isOk());
  ASSERT_EQ(doc.memory().size(), 2u);
  EXPECT_EQ(doc.memory()[0].step, 1);
  EXPECT_EQ(doc.memory()[1].step, 2);
  for (int c = 0; c < MemorySample::kCategoryCount; ++c) {
    EXPECT_DOUBLE_EQ(doc.memory()[1].bytes[c], TestTrace::memoryBytes(2, c)) << c;
  }

  QSignalSpy refreshed(&doc, &TraceDocument::refreshed);
  ASSERT_TRUE(doc.refresh().isOk());  // nothing new
  EXPECT_EQ(refreshed.count(), 0);
  ASSERT_TRUE(trace.addStep(3).isOk());
  ASSERT_TRUE(trace.addStep(4).isOk());
  ASSERT_TRUE(doc.refresh().isOk());
  EXPECT_EQ(refreshed.count(), 1);
  ASSERT_EQ(doc.memory().size(), 4u);  // appended, no duplicates
  EXPECT_EQ(doc.memory()[3].step, 4);
  EXPECT_DOUBLE_EQ(doc.memory()[3].bytes[MemorySample::kActivations],
                   TestTrace::memoryBytes(4, MemorySample::kActivations));
  EXPECT_DOUBLE_EQ(doc.memory()[2].bytes[MemorySample::kOptimizer],
                   TestTrace::memoryBytes(3, MemorySample::kOptimizer));
  ASSERT_TRUE(trace.finish().isOk());
  ASSERT_TRUE(doc.refresh().isOk());
  EXPECT_EQ(doc.memory().size(), 4u);
  doc.close();
  EXPECT_TRUE(doc.memory().empty());
}

TEST_F(TraceDocumentTest, TracesWithoutMemoryCountersHaveNoMemory) {
  const std::string file = path("old.sqlite");
  auto created = TestTrace::create(file, 1, 2);
  ASSERT_TRUE(created.isOk());
  ASSERT_TRUE(created.value()->addStep(0).isOk());
  ASSERT_TRUE(created.value()->finish().isOk());
  TraceDocument doc;
  ASSERT_TRUE(doc.open(QString::fromStdString(file)).isOk());
  EXPECT_TRUE(doc.memory().empty());
  EXPECT_EQ(MemorySample::categoryOf("memory.tensor_bytes"), -1);
  EXPECT_EQ(MemorySample::categoryOf("memory.grads_bytes"), MemorySample::kGrads);
}

TEST_F(TraceDocumentTest, UnreadableFilesAreErrorsNotCrashes) {
  TraceDocument doc;
  QSignalSpy failed(&doc, &TraceDocument::failed);
  Status missing = doc.open(QString::fromStdString(path("missing.sqlite")));
  EXPECT_FALSE(missing.isOk());
  EXPECT_NE(missing.message().find("missing.sqlite"), std::string::npos) << missing.toString();
  EXPECT_FALSE(doc.isOpen());
  {
    std::ofstream junk(path("junk.sqlite"));
    junk << "this is not an SQLite database, just some text that a user picked by mistake\n";
  }
  EXPECT_FALSE(doc.open(QString::fromStdString(path("junk.sqlite"))).isOk());
  EXPECT_EQ(failed.count(), 2);

  // A good document stays open when the next file cannot be opened.
  auto trace = TestTrace::create(path("good.sqlite"), 1, 2);
  ASSERT_TRUE(trace.isOk());
  ASSERT_TRUE(trace.value()->addStep(0).isOk());
  ASSERT_TRUE(trace.value()->finish().isOk());
  ASSERT_TRUE(doc.open(QString::fromStdString(path("good.sqlite"))).isOk());
  EXPECT_FALSE(doc.open(QString::fromStdString(path("junk.sqlite"))).isOk());
  EXPECT_TRUE(doc.isOpen());
  EXPECT_EQ(doc.stepModel()->rowCount(), 1);
}

}  // namespace
}  // namespace moewb::gui
