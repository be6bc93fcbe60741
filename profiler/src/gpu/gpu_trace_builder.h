// GpuTraceBuilder: turns plain GPU records (gpu_records.h) plus the engine's host events into
// trace rows with step, layer and phase set, and writes them through the TraceWriter.
//
// Attribution, per API call (runtime or driver): the innermost NVTX range of the "moewb" domain
// on the calling thread that encloses the call's start names the phase ("experts.fwd"); the step
// is the StepEvent interval holding the call. The layer comes from the engine's PhaseEvents: in
// one step, the k-th "moewb" range named N on the trainer thread (in the order the ranges closed)
// is the k-th PhaseEvent named N (events arrive in the order phases close), so the join needs no
// clock agreement between host events and CUPTI. Kernels, copies, memsets, memory and sync
// records take the attribution of the API call with their correlation id. Records without one
// (correlation id 0: the static device memory a module gets when CUDA loads it lazily, inside
// the launch that needs it) take the attribution of the innermost API call whose interval holds
// their timestamp. Work inside a step but outside every range gets phase "step", work before the
// first step "setup".
// Foreign programs (`moewb capture`, setForeignProgram): there are no steps and no PhaseEvents;
// the innermost NVTX range of any domain on the calling thread names the phase, work outside
// every range gets phase "external", and rows keep step -1 and layer -1. resolveBefore(cutoff)
// writes what started before a time; ranges still open then count as enclosing later calls.
//
// Ordering: records may arrive in any order across buffers; resolveThrough(step) writes every
// record of the steps up to `step` and must only be called once all records of calls made before
// that step's end have been added (the capture flushes CUPTI first). Records of later calls wait.
// Problems are counted (counters()), never fatal.
// Thread-safety: addPhase/addStep/setTrainerThread from the trainer thread, everything else from
// one other thread (the parser); the host events are handed over under a mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpu/gpu_records.h"
#include "moewb/engine/event_sink.h"
#include "moewb/storage/trace_writer.h"

namespace moewb::profiler::gpu {

struct BuilderCounters {
  int64_t records = 0;            // records added
  int64_t unattributed = 0;       // device records whose API call was never seen
  int64_t unmatchedRanges = 0;    // "moewb" ranges without a PhaseEvent (layer unknown)
  int64_t unmatchedPhases = 0;    // PhaseEvents without a "moewb" range
  int64_t unclosedRanges = 0;     // range starts without an end at resolveAll
};

class GpuTraceBuilder {
 public:
  // `writer` must outlive the builder; `rank` tags the tracks.
  GpuTraceBuilder(storage::TraceWriter* writer, int32_t rank);

  // Trainer thread: the OS thread id (gettid) whose "moewb" ranges pair with PhaseEvents (0 =
  // any thread), and the host events. Cheap: a copy under a mutex.
  void setTrainerThread(uint32_t threadId);
  void addPhase(const engine::PhaseEvent& event);
  void addStep(int64_t step, int64_t startNs, int64_t endNs);

  // Before the first record: attribute a foreign program's work (see the file comment).
  void setForeignProgram() { m_foreign = true; }

  // Parser thread.
  void addRecords(std::vector<Record>&& records);
  // Writes every record that started before `cutoffNs` (steady clock); call only once every
  // record of API calls made before the cutoff has been added (flush CUPTI first).
  void resolveBefore(int64_t cutoffNs);
  // Writes every record of steps <= `step` (and of calls before that step's end).
  void resolveThrough(int64_t step);
  // Writes everything still held (end of capture).
  void resolveAll();
  const BuilderCounters& counters() const { return m_counters; }

 private:
  struct Range {
    int64_t startNs = 0;
    int64_t endNs = 0;
    uint32_t threadId = 0;
    std::string name;
    std::string domain;
    int64_t step = -1;
    int32_t layer = -1;
    bool open = false;  // still open at the cutoff: encloses calls, written once it closes
  };
  struct Attribution {
    int64_t step = -1;
    int32_t layer = -1;
    std::string phase;
    TrackId apiTrack;
  };
  struct StepSpan {
    int64_t startNs = 0;
    int64_t endNs = 0;
  };
  struct CallSpan {  // an API call's interval and attribution, for records without correlation
    int64_t startNs = 0;
    int64_t endNs = 0;
    Attribution attribution;
  };

  void takeHostEvents();
  void resolveUntil(int64_t cutoffNs);
  int64_t stepAt(int64_t tsNs) const;
  std::string outsidePhase(int64_t tsNs) const;
  void matchRanges(std::vector<Range*>& moewbRanges);
  void resolveThread(uint32_t threadId, std::vector<Range>& ranges, std::vector<ApiCall>& calls);
  void writeDevice(const Record& record);
  Attribution attributionFor(uint32_t correlationId, int64_t tsNs);
  const Attribution* callEnclosing(int64_t tsNs) const;
  TrackId streamTrack(uint32_t deviceId, int64_t streamId);
  TrackId apiTrack(uint32_t threadId);
  bool isTrainerRange(const Range& range) const;

  storage::TraceWriter* m_writer;
  int32_t m_rank;
  bool m_foreign = false;

  std::mutex m_hostMutex;  // guards the three host fields below
  uint32_t m_trainerThreadShared = 0;
  std::vector<engine::PhaseEvent> m_phasesIn;
  std::vector<std::pair<int64_t, StepSpan>> m_stepsIn;

  // Parser thread only.
  uint32_t m_trainerThread = 0;
  std::map<int64_t, StepSpan> m_steps;
  std::map<int64_t, std::vector<engine::PhaseEvent>> m_phases;  // by step, arrival order
  std::unordered_map<uint32_t, NvtxMarker> m_openRanges;        // by marker id
  std::vector<Range> m_ranges;                                  // closed, not yet written
  std::vector<NvtxMarker> m_instants;
  std::vector<ApiCall> m_calls;                                 // not yet written
  std::vector<Record> m_device;                                 // not yet written
  std::unordered_map<uint32_t, Attribution> m_attribution;      // by correlation id
  std::deque<std::vector<uint32_t>> m_attributionAge;           // ids per resolution
  std::deque<std::vector<CallSpan>> m_callSpans;  // per resolution, sorted by start
  std::map<std::pair<uint32_t, int64_t>, TrackId> m_streamTracks;
  std::unordered_map<uint32_t, TrackId> m_apiTracks;
  BuilderCounters m_counters;
};

}  // namespace moewb::profiler::gpu
