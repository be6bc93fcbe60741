// exportChromeTrace: a trace file as Chrome Trace Event JSON (object form), streamed event by
// event so memory stays O(tracks) however many slices the file holds.
//
// Layout: {"displayTimeUnit":"ms","metadata":{meta keys..., "runs":[...]},"traceEvents":[...]}.
// pid = rank, tid = track id; "M" events name processes ("rank N") and threads (track names);
// slices become "X" events, counter samples "C" events, device-memory events "C" events named
// "device memory.<category>" with the category's bytes in use. ts/dur are microseconds (double)
// relative to the first slice start.
// GPU capture: the CUDA stream tracks (kind "stream") are threads of a process "GPU" (pid
// kGpuPidBase + rank, one tid per stream track) holding the kernel, memcpy and memset "X" events;
// each API call is joined to the GPU work it launched (same correlation id and rank) by a flow
// arrow: "s" at the call's start on its API thread, "f" (binding to the enclosing slice) at the
// work's start, both with the flow id correlation id * 1024 + rank. GPU work events carry their
// launch details in args (grid, block, registers, shared memory; copy kind and bytes; phase).
// The file is written as <out>.part and renamed at the end, so a failed export leaves nothing
// half-written behind. Cost: one pass over slices, counters and memory events; memory O(tracks)
// plus the API calls whose work has not started yet (calls that launch no work, such as
// synchronisations, stay held until the end).
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "moewb/base/units.h"
#include "moewb/storage/gpu_rows.h"
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

// Process ids of the per-rank "GPU" processes (pid = kGpuPidBase + rank), clear of rank pids.
constexpr int32_t kGpuPidBase = 1'000'000;

bool isStreamTrack(const TrackRow& track) {
  return track.kind == kTrackKindStream;
}

// The chrome pid of `track`: its rank, or the rank's GPU process for a stream track.
int32_t pidOf(const TrackRow& track) {
  return isStreamTrack(track) ? kGpuPidBase + track.rank : track.rank;
}

// Flow id of the launch with correlation id `correlationId` on `rank` (ids are per process).
// A GPU work slice's details as Nsight Systems shows them: grid, block, registers and shared
// memory of a kernel; kind and bytes of a copy; bytes and value of a memset; the phase.
void addGpuWorkArgs(const GpuWorkRow& work, nlohmann::json& args) {
  if (const auto& k = work.kernel) {
    args["grid"] = fmt::format("{}x{}x{}", k->gridX, k->gridY, k->gridZ);
    args["block"] = fmt::format("{}x{}x{}", k->blockX, k->blockY, k->blockZ);
    args["registers_per_thread"] = k->registersPerThread;
    args["static_shared_bytes"] = k->staticSharedBytes;
    args["dynamic_shared_bytes"] = k->dynamicSharedBytes;
    args["stream"] = k->streamId;
    args["phase"] = k->phase;
  } else if (const auto& c = work.memcpy) {
    args["copy_kind"] = c->copyKind;
    args["src_kind"] = c->srcKind;
    args["dst_kind"] = c->dstKind;
    args["bytes"] = c->bytes;
    args["stream"] = c->streamId;
    args["phase"] = c->phase;
  } else if (const auto& m = work.memset) {
    args["bytes"] = m->bytes;
    args["value"] = m->value;
    args["stream"] = m->streamId;
    args["phase"] = m->phase;
  }
}

int64_t flowId(int64_t correlationId, int32_t rank) {
  return correlationId * 1024 + rank;
}

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
  std::set<int32_t> ranks, gpuRanks;
  for (const TrackRow& track : tracks) (isStreamTrack(track) ? gpuRanks : ranks).insert(track.rank);
  for (int32_t rank : ranks) {
    events.write({{"name", "process_name"},
                  {"ph", "M"},
                  {"pid", rank},
                  {"tid", 0},
                  {"args", {{"name", fmt::format("rank {}", rank)}}}});
  }
  for (int32_t rank : gpuRanks) {
    const int32_t pid = kGpuPidBase + rank;
    events.write({{"name", "process_name"},
                  {"ph", "M"},
                  {"pid", pid},
                  {"tid", 0},
                  {"args", {{"name", rank == 0 ? std::string("GPU")
                                               : fmt::format("GPU (rank {})", rank)}}}});
    // Below the host processes.
    events.write({{"name", "process_sort_index"},
                  {"ph", "M"},
                  {"pid", pid},
                  {"tid", 0},
                  {"args", {{"sort_index", pid}}}});
  }
  for (const TrackRow& track : tracks) {
    events.write({{"name", "thread_name"},
                  {"ph", "M"},
                  {"pid", pidOf(track)},
                  {"tid", track.id.value},
                  {"args", {{"name", track.name}}}});
    events.write({{"name", "thread_sort_index"},
                  {"ph", "M"},
                  {"pid", pidOf(track)},
                  {"tid", track.id.value},
                  {"args", {{"sort_index", track.id.value}}}});
  }
}

// Joins API calls to the GPU work they launched and writes each pair's flow events.
class FlowWriter {
 public:
  FlowWriter(EventStream& events, int64_t originNs) : m_events(events), m_originNs(originNs) {}
  // Sees a slice in start order on a track with chrome pid `pid` of rank `rank`.
  void add(const SliceRow& s, int32_t pid, int32_t rank) {
    if (s.correlationId == 0) return;
    const int64_t id = flowId(s.correlationId, rank);
    if (s.category == kCategoryApi) {
      m_pending[id] = {pid, s.track.value, s.startNs};
      return;
    }
    if (!isGpuWorkCategory(s.category)) return;
    auto it = m_pending.find(id);
    if (it == m_pending.end()) return;
    const Pending& call = it->second;
    m_events.write({{"name", "launch"},
                    {"cat", "cuda_flow"},
                    {"ph", "s"},
                    {"id", id},
                    {"ts", toUs(call.startNs - m_originNs)},
                    {"pid", call.pid},
                    {"tid", call.tid},
                    {"args", {{"correlation_id", s.correlationId}}}});
    m_events.write({{"name", "launch"},
                    {"cat", "cuda_flow"},
                    {"ph", "f"},
                    {"bp", "e"},
                    {"id", id},
                    {"ts", toUs(s.startNs - m_originNs)},
                    {"pid", pid},
                    {"tid", s.track.value},
                    {"args", {{"correlation_id", s.correlationId}}}});
    m_pending.erase(it);
  }

 private:
  struct Pending {
    int32_t pid = 0;
    int64_t tid = 0;
    int64_t startNs = 0;
  };
  EventStream& m_events;
  int64_t m_originNs;
  std::unordered_map<int64_t, Pending> m_pending;  // by flow id
};

Status writeBody(TraceReader& reader, std::ofstream& out) {
  MOEWB_ASSIGN_OR_RETURN(const json metadata, metadataObject(reader));
  MOEWB_ASSIGN_OR_RETURN(const std::vector<TrackRow> tracks, reader.tracks());
  MOEWB_ASSIGN_OR_RETURN(const TimeWindow bounds, reader.timeBounds());
  std::map<int64_t, const TrackRow*> trackById;
  for (const TrackRow& track : tracks) trackById[track.id.value] = &track;
  auto rankOf = [&](TrackId track) {
    auto it = trackById.find(track.value);
    return it == trackById.end() ? 0 : it->second->rank;
  };
  auto pidOfTrack = [&](TrackId track) {
    auto it = trackById.find(track.value);
    return it == trackById.end() ? 0 : pidOf(*it->second);
  };
  const int64_t originNs = bounds.startNs;

  out << R"({"displayTimeUnit":"ms","metadata":)" << metadata.dump() << R"(,"traceEvents":[)";
  EventStream events(out);
  writeNameEvents(events, tracks);
  FlowWriter flows(events, originNs);
  MOEWB_RETURN_IF_ERROR(reader.forEachSliceWithGpuWork([&](const SliceRow& s,
                                                            const GpuWorkRow* work) {
    json args = {{"step", s.step}, {"layer", s.layer}, {"depth", s.depth}};
    if (s.correlationId != 0) args["correlation_id"] = s.correlationId;
    if (work != nullptr) addGpuWorkArgs(*work, args);
    const int32_t pid = pidOfTrack(s.track);
    events.write({{"name", s.name},
                  {"cat", s.category},
                  {"ph", "X"},
                  {"ts", toUs(s.startNs - originNs)},
                  {"dur", toUs(s.durNs)},
                  {"pid", pid},
                  {"tid", s.track.value},
                  {"args", std::move(args)}});
    flows.add(s, pid, rankOf(s.track));
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
