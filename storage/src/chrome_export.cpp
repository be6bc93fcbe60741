// exportChromeTrace: a trace file as Chrome Trace Event JSON (object form), streamed event by
// event so memory stays O(tracks) however many slices the file holds.
//
// Layout: {"displayTimeUnit":"ms","metadata":{meta keys..., "runs":[...]},"traceEvents":[...]}.
// pid = rank, tid = track id; "M" events name processes ("rank N") and threads (track names);
// slices become "X" events, counter samples "C" events, device-memory events "C" events named
// "device memory.<category>" with the category's bytes in use. ts/dur are microseconds (double)
// relative to the first slice start.
// Swap: each copy an "X" event named "layer <l> <op> D2H|H2D" on a "swap D2H" or "swap H2D"
// thread of its rank (args bytes, op, layer, step, stall_ms, late, simulated); a late copy
// (stall > 0: a reload its consumer waited for, or an offload compute waited for to free its
// memory) is coloured "terrible" and gets an instant event "late: ..." at the time the consumer
// (compute, for an offload) reached it; each swap step's HBM peak with and without swap and
// pinned peak are counters swap.hbm_peak_bytes, swap.hbm_peak_no_swap_bytes,
// swap.pinned_peak_bytes at the step's start.
// GPU capture: the CUDA stream tracks (kind "stream") are threads of a process "GPU" (pid
// kGpuPidBase + rank, one tid per stream track) holding the kernel, memcpy and memset "X" events;
// each API call is joined to the GPU work it launched (same correlation id and rank) by a flow
// arrow: "s" at the call's start on its API thread, "f" (binding to the enclosing slice) at the
// work's start, both with the flow id correlation id * 1024 + rank. GPU work events carry their
// launch details in args (grid, block, registers, shared memory; copy kind and bytes; phase).
// Values from the file are untrusted: texts are written with invalid UTF-8 replaced by U+FFFD,
// times whose distance from the origin overflows int64 are clamped, ids and pids are computed
// without signed overflow; both repairs are counted in ChromeExportStats.
// The file is written as <out>.part and renamed at the end, so a failed export leaves nothing
// half-written behind. Cost: one pass over slices, counters, memory and swap events (swap copies
// in ~1024 time windows, so their memory is that of one window); memory O(tracks)
// plus the API calls whose work has not started yet (calls that launch no work, such as
// synchronisations, stay held until the end).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "moewb/base/text.h"
#include "moewb/base/units.h"
#include "moewb/storage/gpu_rows.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::storage {

namespace {

using nlohmann::json;

// JSON text of `value`; invalid UTF-8 in any string becomes U+FFFD instead of throwing.
std::string dumpJson(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Writes the "traceEvents" array one event at a time.
class EventStream {
 public:
  explicit EventStream(std::ofstream& out) : m_out(out) {}
  void write(const json& event) {
    m_out << (m_first ? "\n" : ",\n") << dumpJson(event);
    m_first = false;
  }

 private:
  std::ofstream& m_out;
  bool m_first = true;
};

// Process ids of the per-rank "GPU" processes (pid = kGpuPidBase + rank), clear of rank pids.
constexpr int64_t kGpuPidBase = 1'000'000;

bool isStreamTrack(const TrackRow& track) {
  return track.kind == kTrackKindStream;
}

// The chrome pid of `track`: its rank, or the rank's GPU process for a stream track.
int64_t pidOf(const TrackRow& track) {
  return isStreamTrack(track) ? kGpuPidBase + track.rank : track.rank;
}

// The repairs of one export: counts texts with invalid UTF-8 and clamped times.
class Repairs {
 public:
  explicit Repairs(int64_t originNs) : m_originNs(originNs) {}
  // `text` unchanged (the JSON dump replaces invalid sequences); counts it when invalid.
  const std::string& text(const std::string& text) {
    if (!isValidUtf8(text)) ++m_stats.invalidUtf8Strings;
    return text;
  }
  // Microseconds from the origin to `ns`, clamped to the int64 range of nanoseconds.
  double relativeUs(int64_t ns) {
    int64_t delta = 0;
    if (__builtin_sub_overflow(ns, m_originNs, &delta)) {
      ++m_stats.clampedTimes;
      delta = ns < m_originNs ? INT64_MIN : INT64_MAX;
    }
    return double(delta) / double(kNsPerUs);
  }
  const ChromeExportStats& stats() const { return m_stats; }

 private:
  int64_t m_originNs;
  ChromeExportStats m_stats;
};

// Flow id of the launch with correlation id `correlationId` on `rank` (ids are per process).
// A GPU work slice's details as Nsight Systems shows them: grid, block, registers and shared
// memory of a kernel; kind and bytes of a copy; bytes and value of a memset; the phase.
void addGpuWorkArgs(const GpuWorkRow& work, nlohmann::json& args, Repairs& repairs) {
  if (const auto& k = work.kernel) {
    args["grid"] = fmt::format("{}x{}x{}", k->gridX, k->gridY, k->gridZ);
    args["block"] = fmt::format("{}x{}x{}", k->blockX, k->blockY, k->blockZ);
    args["registers_per_thread"] = k->registersPerThread;
    args["static_shared_bytes"] = k->staticSharedBytes;
    args["dynamic_shared_bytes"] = k->dynamicSharedBytes;
    args["stream"] = k->streamId;
    args["phase"] = repairs.text(k->phase);
  } else if (const auto& c = work.memcpy) {
    args["copy_kind"] = c->copyKind;
    args["src_kind"] = c->srcKind;
    args["dst_kind"] = c->dstKind;
    args["bytes"] = c->bytes;
    args["stream"] = c->streamId;
    args["phase"] = repairs.text(c->phase);
  } else if (const auto& m = work.memset) {
    args["bytes"] = m->bytes;
    args["value"] = m->value;
    args["stream"] = m->streamId;
    args["phase"] = repairs.text(m->phase);
  }
}

// Wraps modulo 2^64 (unsigned arithmetic) for correlation ids read from a file.
int64_t flowId(int64_t correlationId, int32_t rank) {
  return int64_t(uint64_t(correlationId) * 1024u + uint64_t(int64_t(rank)));
}

double toUs(int64_t ns) {
  return double(ns) / double(kNsPerUs);
}

Result<json> metadataObject(TraceReader& reader, Repairs& repairs) {
  MOEWB_ASSIGN_OR_RETURN(const auto meta, reader.meta());
  MOEWB_ASSIGN_OR_RETURN(const auto runs, reader.runs());
  json metadata = json::object();
  for (const auto& [key, value] : meta) metadata[repairs.text(key)] = repairs.text(value);
  json runList = json::array();
  for (const RunRow& run : runs) {
    runList.push_back({{"id", run.id.value},
                       {"name", repairs.text(run.name)},
                       {"backend", repairs.text(run.backend)},
                       {"world_size", run.worldSize},
                       {"status", repairs.text(run.status)}});
  }
  metadata["runs"] = std::move(runList);
  metadata["source"] = reader.path();
  return metadata;
}

void writeNameEvents(EventStream& events, const std::vector<TrackRow>& tracks, Repairs& repairs) {
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
    const int64_t pid = kGpuPidBase + rank;
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
                  {"args", {{"name", repairs.text(track.name)}}}});
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
  FlowWriter(EventStream& events, Repairs& repairs) : m_events(events), m_repairs(repairs) {}
  // Sees a slice in start order on a track with chrome pid `pid` of rank `rank`.
  void add(const SliceRow& s, int64_t pid, int32_t rank) {
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
                    {"ts", m_repairs.relativeUs(call.startNs)},
                    {"pid", call.pid},
                    {"tid", call.tid},
                    {"args", {{"correlation_id", s.correlationId}}}});
    m_events.write({{"name", "launch"},
                    {"cat", "cuda_flow"},
                    {"ph", "f"},
                    {"bp", "e"},
                    {"id", id},
                    {"ts", m_repairs.relativeUs(s.startNs)},
                    {"pid", pid},
                    {"tid", s.track.value},
                    {"args", {{"correlation_id", s.correlationId}}}});
    m_pending.erase(it);
  }

 private:
  struct Pending {
    int64_t pid = 0;
    int64_t tid = 0;
    int64_t startNs = 0;
  };
  EventStream& m_events;
  Repairs& m_repairs;
  std::unordered_map<int64_t, Pending> m_pending;  // by flow id
};

// Swap copies go on two threads per rank, clear of the track ids: kSwapTidBase (D2H offloads)
// and kSwapTidBase + 1 (H2D reloads).
constexpr int64_t kSwapTidBase = int64_t(1) << 40;
// Swap copies are read in this many windows over the slices' time span (plus one before and one
// after), so memory stays O(copies per window).
constexpr int64_t kSwapWindows = 1024;

// Writes the swap copies as "X" events on the "swap D2H" / "swap H2D" threads of their rank
// (late copies, reloads or offloads, coloured "terrible" plus an instant "late" event at the
// time compute began to wait), and each swap step's watermarks as counters at the start of that
// step.
class SwapWriter {
 public:
  SwapWriter(EventStream& events, Repairs& repairs) : m_events(events), m_repairs(repairs) {}

  Status writeCopies(TraceReader& reader, TimeWindow bounds, std::ofstream& out) {
    std::vector<TimeWindow> windows = {{std::numeric_limits<int64_t>::min(), bounds.startNs}};
    const int64_t spanNs = spanOf(bounds);
    const int64_t stepNs = std::max<int64_t>(1, spanNs / kSwapWindows + 1);
    int64_t at = bounds.startNs;
    for (int64_t i = 0; i < kSwapWindows + 1 && at <= bounds.endNs; ++i) {
      const int64_t next = at > std::numeric_limits<int64_t>::max() - stepNs
                               ? std::numeric_limits<int64_t>::max()
                               : at + stepNs;
      windows.push_back({at, next});
      at = next;
    }
    windows.push_back({at, std::numeric_limits<int64_t>::max()});
    for (const TimeWindow& window : windows) {
      if (window.endNs <= window.startNs) continue;
      MOEWB_ASSIGN_OR_RETURN(const std::vector<SwapEventRow> rows, reader.swapEvents(window));
      for (const SwapEventRow& row : rows) {
        if (row.startNs < window.startNs) continue;  // written with an earlier window
        writeCopy(row);
      }
      if (!out) break;
    }
    return Status::ok();
  }

  Status writeWatermarks(TraceReader& reader) {
    MOEWB_ASSIGN_OR_RETURN(const std::vector<SwapStepRow> steps, reader.swapSteps());
    if (steps.empty()) return Status::ok();
    std::map<std::pair<int32_t, int64_t>, int64_t> stepStartNs;  // (rank, step) -> start
    MOEWB_ASSIGN_OR_RETURN(const std::vector<RunRow> runs, reader.runs());
    for (const RunRow& run : runs) {
      MOEWB_ASSIGN_OR_RETURN(const std::vector<StepRow> rows, reader.steps(run.id));
      for (const StepRow& row : rows) {
        stepStartNs.emplace(std::pair(row.rank, row.step), row.startNs);
      }
    }
    for (const SwapStepRow& s : steps) {
      auto it = stepStartNs.find({s.rank, s.step});
      if (it == stepStartNs.end()) continue;  // no step row: no time to draw it at
      const std::pair<const char*, int64_t> values[] = {
          {"swap.hbm_peak_bytes", s.hbmPeakBytes},
          {"swap.hbm_peak_no_swap_bytes", s.hbmPeakNoSwapBytes},
          {"swap.pinned_peak_bytes", s.pinnedPeakBytes},
      };
      for (const auto& [name, bytes] : values) {
        m_events.write({{"name", name},
                        {"cat", "swap"},
                        {"ph", "C"},
                        {"ts", m_repairs.relativeUs(it->second)},
                        {"pid", s.rank},
                        {"args", {{"bytes", bytes}}}});
      }
    }
    return Status::ok();
  }

 private:
  static int64_t spanOf(TimeWindow bounds) {
    int64_t span = 0;
    if (__builtin_sub_overflow(bounds.endNs, bounds.startNs, &span)) {
      return std::numeric_limits<int64_t>::max();
    }
    return std::max<int64_t>(span, 0);
  }

  void nameThreads(int32_t rank) {
    if (!m_namedRanks.insert(rank).second) return;
    for (int64_t lane = 0; lane < 2; ++lane) {
      const int64_t tid = kSwapTidBase + lane;
      m_events.write({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"tid", tid},
                      {"args", {{"name", lane == 0 ? "swap D2H" : "swap H2D"}}}});
      m_events.write({{"name", "thread_sort_index"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"tid", tid},
                      {"args", {{"sort_index", tid}}}});
    }
  }

  void writeCopy(const SwapEventRow& row) {
    nameThreads(row.rank);
    const int64_t tid = kSwapTidBase + (row.toHost ? 0 : 1);
    const bool late = row.stallNs > 0;  // a reload stall or an offload wait
    const double stallMs = double(row.stallNs) / double(kNsPerMs);
    const std::string name = fmt::format("layer {} {} {}", row.layer, m_repairs.text(row.op),
                                         row.toHost ? "D2H" : "H2D");
    int64_t durNs = 0;
    if (__builtin_sub_overflow(row.endNs, row.startNs, &durNs)) {
      durNs = std::numeric_limits<int64_t>::max();
    }
    json args = {{"bytes", row.bytes}, {"op", row.op},     {"layer", row.layer},
                 {"step", row.step},   {"stall_ms", stallMs}, {"late", late},
                 {"simulated", row.simulated}};
    json event = {{"name", name},
                  {"cat", "swap"},
                  {"ph", "X"},
                  {"ts", m_repairs.relativeUs(row.startNs)},
                  {"dur", toUs(durNs)},
                  {"pid", row.rank},
                  {"tid", tid},
                  {"args", std::move(args)}};
    if (late) event["cname"] = "terrible";
    m_events.write(event);
    if (!late) return;
    m_events.write({{"name", fmt::format("late: {} ({} {:.3f} ms)", name,
                                         row.toHost ? "compute waited" : "stall", stallMs)},
                    {"cat", "swap"},
                    {"ph", "i"},
                    {"s", "t"},
                    {"cname", "terrible"},
                    {"ts", m_repairs.relativeUs(row.neededNs)},
                    {"pid", row.rank},
                    {"tid", tid},
                    {"args", {{"stall_ms", stallMs}, {"layer", row.layer}, {"op", row.op}}}});
  }

  EventStream& m_events;
  Repairs& m_repairs;
  std::set<int32_t> m_namedRanks;
};

Status writeBody(TraceReader& reader, std::ofstream& out, ChromeExportStats& stats) {
  MOEWB_ASSIGN_OR_RETURN(const std::vector<TrackRow> tracks, reader.tracks());
  MOEWB_ASSIGN_OR_RETURN(const TimeWindow bounds, reader.timeBounds());
  Repairs repairs(bounds.startNs);
  MOEWB_ASSIGN_OR_RETURN(const json metadata, metadataObject(reader, repairs));
  std::map<int64_t, const TrackRow*> trackById;
  for (const TrackRow& track : tracks) trackById[track.id.value] = &track;
  auto rankOf = [&](TrackId track) {
    auto it = trackById.find(track.value);
    return it == trackById.end() ? 0 : it->second->rank;
  };
  auto pidOfTrack = [&](TrackId track) {
    auto it = trackById.find(track.value);
    return it == trackById.end() ? int64_t{0} : pidOf(*it->second);
  };

  out << R"({"displayTimeUnit":"ms","metadata":)" << dumpJson(metadata) << R"(,"traceEvents":[)";
  EventStream events(out);
  writeNameEvents(events, tracks, repairs);
  FlowWriter flows(events, repairs);
  MOEWB_RETURN_IF_ERROR(reader.forEachSliceWithGpuWork([&](const SliceRow& s,
                                                            const GpuWorkRow* work) {
    json args = {{"step", s.step}, {"layer", s.layer}, {"depth", s.depth}};
    if (s.correlationId != 0) args["correlation_id"] = s.correlationId;
    if (work != nullptr) addGpuWorkArgs(*work, args, repairs);
    const int64_t pid = pidOfTrack(s.track);
    events.write({{"name", repairs.text(s.name)},
                  {"cat", repairs.text(s.category)},
                  {"ph", "X"},
                  {"ts", repairs.relativeUs(s.startNs)},
                  {"dur", toUs(s.durNs)},
                  {"pid", pid},
                  {"tid", s.track.value},
                  {"args", std::move(args)}});
    flows.add(s, pid, rankOf(s.track));
    return bool(out);
  }));
  MOEWB_RETURN_IF_ERROR(reader.forEachCounter([&](const CounterRow& c) {
    events.write({{"name", repairs.text(c.name)},
                  {"ph", "C"},
                  {"ts", repairs.relativeUs(c.tsNs)},
                  {"pid", rankOf(c.track)},
                  {"tid", c.track.value},
                  {"args", {{"value", c.value}}}});
    return bool(out);
  }));
  // Device memory: one counter per (memory track, category), so Perfetto draws each category's
  // bytes in use as its own counter track under the rank.
  MOEWB_RETURN_IF_ERROR(reader.forEachMemoryEvent([&](const MemoryEventRow& m) {
    events.write({{"name", "device memory." + repairs.text(m.category)},
                  {"cat", "memory"},
                  {"ph", "C"},
                  {"ts", repairs.relativeUs(m.tsNs)},
                  {"pid", rankOf(m.track)},
                  {"tid", m.track.value},
                  {"args", {{"bytes", m.inUseBytes}}}});
    return bool(out);
  }));
  SwapWriter swaps(events, repairs);
  MOEWB_RETURN_IF_ERROR(swaps.writeCopies(reader, bounds, out));
  MOEWB_RETURN_IF_ERROR(swaps.writeWatermarks(reader));
  out << "\n]}\n";
  stats = repairs.stats();
  return Status::ok();
}

}  // namespace

Status exportChromeTrace(TraceReader& reader, const std::string& outPath,
                         ChromeExportStats* stats) {
  namespace fs = std::filesystem;
  const std::string partPath = outPath + ".part";
  std::ofstream out(partPath, std::ios::binary | std::ios::trunc);
  if (!out) {
    return internalError(
        fmt::format("cannot write Chrome trace '{}': cannot create '{}'", outPath, partPath));
  }
  ChromeExportStats repaired;
  Status status = writeBody(reader, out, repaired);
  if (stats) *stats = repaired;
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
