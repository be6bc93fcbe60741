// exportChromeTrace: a trace file as Chrome Trace Event JSON (object form), streamed event by
// event so memory stays O(tracks) however many slices the file holds.
//
// Layout: {"displayTimeUnit":"ms","metadata":{meta keys..., "runs":[...]},"traceEvents":[...]}.
// pid = rank, tid = track id; "M" events name processes ("rank N") and threads (track names);
// slices become "X" events, counter samples "C" events, device-memory events "C" events named
// "device memory.<category>" with the category's bytes in use. ts/dur are microseconds (double) relative
// to the first slice start. The file is written as <out>.part and renamed at the end, so a failed
// export leaves nothing half-written behind. Cost: one pass over slices, counters and memory events.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "moewb/base/units.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::storage {

namespace {

using nlohmann::json;

// Writes the "traceEvents" array one event at a time.
class EventStream {
 public:
  explicit EventStream(std::ofstream& out) : m_out(out) {}
  void write(const json& event) {
    m_out << (m_first ? "\n" : ",\n") << event.dump();
    m_first = false;
  }

 private:
  std::ofstream& m_out;
  bool m_first = true;
};

double toUs(int64_t ns) {
  return double(ns) / double(kNsPerUs);
}

Result<json> metadataObject(TraceReader& reader) {
  MOEWB_ASSIGN_OR_RETURN(const auto meta, reader.meta());
  MOEWB_ASSIGN_OR_RETURN(const auto runs, reader.runs());
  json metadata = json::object();
  for (const auto& [key, value] : meta) metadata[key] = value;
  json runList = json::array();
  for (const RunRow& run : runs) {
    runList.push_back({{"id", run.id.value},
                       {"name", run.name},
                       {"backend", run.backend},
                       {"world_size", run.worldSize},
                       {"status", run.status}});
  }
  metadata["runs"] = std::move(runList);
  metadata["source"] = reader.path();
  return metadata;
}

void writeNameEvents(EventStream& events, const std::vector<TrackRow>& tracks) {
  std::set<int32_t> ranks;
  for (const TrackRow& track : tracks) ranks.insert(track.rank);
  for (int32_t rank : ranks) {
    events.write({{"name", "process_name"},
                  {"ph", "M"},
                  {"pid", rank},
                  {"tid", 0},
                  {"args", {{"name", fmt::format("rank {}", rank)}}}});
  }
  for (const TrackRow& track : tracks) {
    events.write({{"name", "thread_name"},
                  {"ph", "M"},
                  {"pid", track.rank},
                  {"tid", track.id.value},
                  {"args", {{"name", track.name}}}});
    events.write({{"name", "thread_sort_index"},
                  {"ph", "M"},
                  {"pid", track.rank},
                  {"tid", track.id.value},
                  {"args", {{"sort_index", track.id.value}}}});
  }
}

Status writeBody(TraceReader& reader, std::ofstream& out) {
  MOEWB_ASSIGN_OR_RETURN(const json metadata, metadataObject(reader));
  MOEWB_ASSIGN_OR_RETURN(const std::vector<TrackRow> tracks, reader.tracks());
  MOEWB_ASSIGN_OR_RETURN(const TimeWindow bounds, reader.timeBounds());
  std::map<int64_t, int32_t> rankOfTrack;
  for (const TrackRow& track : tracks) rankOfTrack[track.id.value] = track.rank;
  auto rankOf = [&](TrackId track) {
    auto it = rankOfTrack.find(track.value);
    return it == rankOfTrack.end() ? 0 : it->second;
  };
  const int64_t originNs = bounds.startNs;

  out << R"({"displayTimeUnit":"ms","metadata":)" << metadata.dump() << R"(,"traceEvents":[)";
  EventStream events(out);
  writeNameEvents(events, tracks);
  MOEWB_RETURN_IF_ERROR(reader.forEachSlice([&](const SliceRow& s) {
    events.write({{"name", s.name},
                  {"cat", s.category},
                  {"ph", "X"},
                  {"ts", toUs(s.startNs - originNs)},
                  {"dur", toUs(s.durNs)},
                  {"pid", rankOf(s.track)},
                  {"tid", s.track.value},
                  {"args", {{"step", s.step}, {"layer", s.layer}, {"depth", s.depth}}}});
    return bool(out);
  }));
  MOEWB_RETURN_IF_ERROR(reader.forEachCounter([&](const CounterRow& c) {
    events.write({{"name", c.name},
                  {"ph", "C"},
                  {"ts", toUs(c.tsNs - originNs)},
                  {"pid", rankOf(c.track)},
                  {"tid", c.track.value},
                  {"args", {{"value", c.value}}}});
    return bool(out);
  }));
  // Device memory: one counter per (memory track, category), so Perfetto draws each category's
  // bytes in use as its own counter track under the rank.
  MOEWB_RETURN_IF_ERROR(reader.forEachMemoryEvent([&](const MemoryEventRow& m) {
    events.write({{"name", "device memory." + m.category},
                  {"cat", "memory"},
                  {"ph", "C"},
                  {"ts", toUs(m.tsNs - originNs)},
                  {"pid", rankOf(m.track)},
                  {"tid", m.track.value},
                  {"args", {{"bytes", m.inUseBytes}}}});
    return bool(out);
  }));
  out << "\n]}\n";
  return Status::ok();
}

}  // namespace

Status exportChromeTrace(TraceReader& reader, const std::string& outPath) {
  namespace fs = std::filesystem;
  const std::string partPath = outPath + ".part";
  std::ofstream out(partPath, std::ios::binary | std::ios::trunc);
  if (!out) {
    return internalError(
        fmt::format("cannot write Chrome trace '{}': cannot create '{}'", outPath, partPath));
  }
  Status status = writeBody(reader, out);
  out.close();
  std::error_code ec;
  if (status.isOk() && !out) {
    status = internalError(
        fmt::format("cannot write Chrome trace '{}': write failed (disk full?)", outPath));
  }
  if (status.isOk()) {
    fs::rename(partPath, outPath, ec);
    if (ec) {
      status =
          internalError(fmt::format("cannot write Chrome trace '{}': {}", outPath, ec.message()));
    }
  }
  if (!status.isOk()) fs::remove(partPath, ec);
  return status;
}

}  // namespace moewb::storage
