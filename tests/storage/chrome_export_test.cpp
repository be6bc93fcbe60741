// exportChromeTrace: the output parses as JSON and holds the expected events, units and
// metadata; an unwritable destination gives an error naming it and leaves nothing behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "test_util.h"

namespace moewb::storage {
namespace {

using nlohmann::json;
using testing::makeSlice;
using testing::TempDir;

constexpr int64_t kBaseNs = 5'000'000'000;  // monotonic clocks do not start at 0

class ChromeExport : public ::testing::Test {
 protected:
  void SetUp() override {
    m_tracePath = m_dir.path("run.moewb");
    auto created = TraceWriter::create(m_tracePath);
    ASSERT_TRUE(created.isOk()) << created.status().toString();
    auto writer = std::move(created).value();
    RunRow run;
    run.name = "export-me";
    run.backend = "cpu";
    writer->addRun(run);
    m_rank0 = writer->addTrack({TrackId(), "trainer rank 0", "thread", 0, 11});
    m_rank1 = writer->addTrack({TrackId(), "trainer rank 1", "thread", 1, 12});
    m_memory = writer->addTrack({TrackId(), "memory", "counter", 1, 0});
    writer->addSlice(makeSlice(m_rank0, "step", kBaseNs, 2'000'000, 0, -1, "step"));
    SliceRow attention = makeSlice(m_rank0, "attention.fwd", kBaseNs + 1'500, 250'500, 0, 2);
    attention.depth = 1;
    writer->addSlice(attention);
    writer->addSlice(makeSlice(m_rank1, "moe.dispatch", kBaseNs + 3'000, 1'000, 0, 1));
    writer->addCounter({m_memory, "memory.in_use_bytes", kBaseNs + 10'000, 1024.0});
    writer->addCounter({m_memory, "memory.in_use_bytes", kBaseNs + 20'000, 2048.0});
    ASSERT_TRUE(writer->close().isOk());
    auto reader = TraceReader::open(m_tracePath);
    ASSERT_TRUE(reader.isOk()) << reader.status().toString();
    m_reader = std::move(reader).value();
  }

  json exportAndParse(const std::string& outPath) {
    const Status status = exportChromeTrace(*m_reader, outPath);
    EXPECT_TRUE(status.isOk()) << status.toString();
    std::ifstream in(outPath);
    return json::parse(in, nullptr, /*allow_exceptions=*/false);
  }

  TempDir m_dir;
  std::string m_tracePath;
  TrackId m_rank0, m_rank1, m_memory;
  std::unique_ptr<TraceReader> m_reader;
};

std::vector<json> eventsWithPhase(const json& doc, const std::string& ph) {
  std::vector<json> out;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == ph) out.push_back(e);
  }
  return out;
}

TEST_F(ChromeExport, WritesCompleteCounterAndMetadataEvents) {
  const std::string out = m_dir.path("run.json");
  const json doc = exportAndParse(out);
  ASSERT_FALSE(doc.is_discarded()) << "the export is not valid JSON";
  EXPECT_FALSE(std::filesystem::exists(out + ".part"));
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  EXPECT_EQ(doc["metadata"]["format"], "moewb-trace");
  EXPECT_EQ(doc["metadata"]["schema_version"], "1");
  EXPECT_EQ(doc["metadata"]["runs"][0]["name"], "export-me");

  // 2 process names + 3 tracks x (thread_name, thread_sort_index) + 3 slices + 2 counters.
  EXPECT_EQ(doc["traceEvents"].size(), 2u + 6u + 3u + 2u);

  const auto complete = eventsWithPhase(doc, "X");
  ASSERT_EQ(complete.size(), 3u);
  EXPECT_EQ(complete[0]["name"], "step");
  EXPECT_EQ(complete[0]["cat"], "step");
  EXPECT_DOUBLE_EQ(complete[0]["ts"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(complete[0]["dur"].get<double>(), 2000.0);  // 2 ms in microseconds
  EXPECT_EQ(complete[1]["name"], "attention.fwd");
  EXPECT_DOUBLE_EQ(complete[1]["ts"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(complete[1]["dur"].get<double>(), 250.5);
  EXPECT_EQ(complete[1]["pid"], 0);
  EXPECT_EQ(complete[1]["tid"], m_rank0.value);
  EXPECT_EQ(complete[1]["args"]["step"], 0);
  EXPECT_EQ(complete[1]["args"]["layer"], 2);
  EXPECT_EQ(complete[1]["args"]["depth"], 1);
  EXPECT_EQ(complete[2]["name"], "moe.dispatch");
  EXPECT_EQ(complete[2]["pid"], 1);
  EXPECT_EQ(complete[2]["tid"], m_rank1.value);

  const auto counters = eventsWithPhase(doc, "C");
  ASSERT_EQ(counters.size(), 2u);
  EXPECT_EQ(counters[0]["name"], "memory.in_use_bytes");
  EXPECT_DOUBLE_EQ(counters[0]["ts"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(counters[0]["args"]["value"].get<double>(), 1024.0);
  EXPECT_EQ(counters[1]["pid"], 1);

  const auto names = eventsWithPhase(doc, "M");
  std::vector<std::string> labels;
  for (const json& e : names) {
    if (e["name"] == "process_name" || e["name"] == "thread_name") {
      labels.push_back(e["name"].get<std::string>() + ":" + e["args"]["name"].get<std::string>());
    }
  }
  EXPECT_EQ(labels, (std::vector<std::string>{"process_name:rank 0", "process_name:rank 1",
                                              "thread_name:trainer rank 0",
                                              "thread_name:trainer rank 1", "thread_name:memory"}));
}

TEST_F(ChromeExport, DeviceMemoryBecomesOneCounterPerCategory) {
  const std::string path = m_dir.path("memory.moewb");
  TrackId memory;
  {
    auto created = TraceWriter::create(path);
    ASSERT_TRUE(created.isOk()) << created.status().toString();
    auto& writer = **created;
    const TrackId thread = writer.addTrack({TrackId(), "trainer thread", "thread", 1, 3});
    memory = writer.addTrack({TrackId(), "device memory", kTrackKindMemory, 1, 0});
    writer.addSlice(makeSlice(thread, "step", kBaseNs, 100'000, 0, -1, "step"));
    writer.addMemoryEvent({memory, kBaseNs, 0, true, 4096, 0, "weights", 4096});
    writer.addMemoryEvent({memory, kBaseNs + 2'000, 0, true, 512, 0x7000, "activations", 512});
    writer.addMemoryEvent({memory, kBaseNs + 5'000, 0, false, 512, 0x7000, "activations", 0});
    ASSERT_TRUE(writer.close().isOk());
  }
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  const std::string out = m_dir.path("memory.json");
  ASSERT_TRUE(exportChromeTrace(**reader, out).isOk());
  std::ifstream in(out);
  const json doc = json::parse(in, nullptr, false);
  ASSERT_FALSE(doc.is_discarded());
  const auto counters = eventsWithPhase(doc, "C");
  ASSERT_EQ(counters.size(), 3u);
  EXPECT_EQ(counters[0]["name"], "device memory.weights");
  EXPECT_EQ(counters[0]["args"]["bytes"], 4096);
  EXPECT_DOUBLE_EQ(counters[0]["ts"].get<double>(), 0.0);
  EXPECT_EQ(counters[1]["name"], "device memory.activations");
  EXPECT_DOUBLE_EQ(counters[1]["ts"].get<double>(), 2.0);
  EXPECT_EQ(counters[1]["args"]["bytes"], 512);
  EXPECT_EQ(counters[2]["args"]["bytes"], 0);
  EXPECT_DOUBLE_EQ(counters[2]["ts"].get<double>(), 5.0);
  for (const json& c : counters) {
    EXPECT_EQ(c["pid"], 1);
    EXPECT_EQ(c["tid"], memory.value);
  }
}

TEST_F(ChromeExport, UnwritableDestinationNamesThePath) {
  const std::string out = m_dir.path("missing-dir/run.json");
  const Status status = exportChromeTrace(*m_reader, out);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.code(), StatusCode::kInternal);
  EXPECT_NE(status.message().find(out), std::string::npos) << status.message();
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST_F(ChromeExport, EmptyTraceIsValidJson) {
  const std::string emptyPath = m_dir.path("empty.moewb");
  {
    auto created = TraceWriter::create(emptyPath);
    ASSERT_TRUE(created.isOk());
    ASSERT_TRUE((*created)->close().isOk());
  }
  auto reader = TraceReader::open(emptyPath);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  const std::string out = m_dir.path("empty.json");
  ASSERT_TRUE(exportChromeTrace(**reader, out).isOk());
  std::ifstream in(out);
  const json doc = json::parse(in, nullptr, false);
  ASSERT_FALSE(doc.is_discarded());
  EXPECT_TRUE(doc["traceEvents"].empty());
}

}  // namespace
}  // namespace moewb::storage
