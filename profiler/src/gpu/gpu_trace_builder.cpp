// GpuTraceBuilder: plain GPU records + host events -> attributed trace rows (see the header).
#include "gpu/gpu_trace_builder.h"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "moewb/storage/gpu_rows.h"

namespace moewb::profiler::gpu {

namespace {

constexpr const char* kEngineDomain = "moewb";
constexpr int64_t kNoCutoff = std::numeric_limits<int64_t>::max();
// API-call attributions are kept for this many resolutions, for device records that arrive late.
constexpr size_t kAttributionGenerations = 3;

int64_t startOf(const Record& record) {
  return std::visit(
      [](const auto& r) -> int64_t {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, NvtxMarker> || std::is_same_v<T, MemoryActivity>) {
          return r.tsNs;
        } else {
          return r.startNs;
        }
      },
      record);
}

}  // namespace

GpuTraceBuilder::GpuTraceBuilder(storage::TraceWriter* writer, int32_t rank)
    : m_writer(writer), m_rank(rank) {}

void GpuTraceBuilder::setTrainerThread(uint32_t threadId) {
  std::lock_guard lock(m_hostMutex);
  m_trainerThreadShared = threadId;
}

void GpuTraceBuilder::addPhase(const engine::PhaseEvent& event) {
  std::lock_guard lock(m_hostMutex);
  m_phasesIn.push_back(event);
}

void GpuTraceBuilder::addStep(int64_t step, int64_t startNs, int64_t endNs) {
  std::lock_guard lock(m_hostMutex);
  m_stepsIn.push_back({step, {startNs, endNs}});
}

void GpuTraceBuilder::takeHostEvents() {
  std::vector<engine::PhaseEvent> phases;
  std::vector<std::pair<int64_t, StepSpan>> steps;
  {
    std::lock_guard lock(m_hostMutex);
    phases.swap(m_phasesIn);
    steps.swap(m_stepsIn);
    m_trainerThread = m_trainerThreadShared;
  }
  for (const auto& event : phases) m_phases[event.step].push_back(event);
  for (const auto& [step, span] : steps) m_steps[step] = span;
}

void GpuTraceBuilder::addRecords(std::vector<Record>&& records) {
  m_counters.records += int64_t(records.size());
  for (Record& record : records) {
    if (auto* marker = std::get_if<NvtxMarker>(&record)) {
      if (marker->kind == NvtxMarker::Kind::kStart) {
        m_openRanges[marker->id] = std::move(*marker);
      } else if (marker->kind == NvtxMarker::Kind::kEnd) {
        auto it = m_openRanges.find(marker->id);
        if (it == m_openRanges.end()) continue;  // its start came before the capture
        const NvtxMarker& start = it->second;
        m_ranges.push_back({start.tsNs, marker->tsNs, start.threadId, start.name, start.domain});
        m_openRanges.erase(it);
      } else {
        m_instants.push_back(std::move(*marker));
      }
    } else if (auto* call = std::get_if<ApiCall>(&record)) {
      m_calls.push_back(std::move(*call));
    } else {
      m_device.push_back(std::move(record));
    }
  }
}

void GpuTraceBuilder::resolveThrough(int64_t step) {
  takeHostEvents();
  auto it = m_steps.find(step);
  if (it == m_steps.end()) return;
  resolveUntil(it->second.endNs);
}

void GpuTraceBuilder::resolveBefore(int64_t cutoffNs) {
  takeHostEvents();
  resolveUntil(cutoffNs);
}

void GpuTraceBuilder::resolveAll() {
  takeHostEvents();
  m_counters.unclosedRanges += int64_t(m_openRanges.size());
  m_openRanges.clear();
  resolveUntil(kNoCutoff);
}

int64_t GpuTraceBuilder::stepAt(int64_t tsNs) const {
  // Steps are few per resolution; a linear scan from the back finds recent ones first.
  for (auto r = m_steps.rbegin(); r != m_steps.rend(); ++r) {
    if (tsNs >= r->second.startNs && tsNs <= r->second.endNs) return r->first;
    if (r->second.endNs < tsNs) break;
  }
  return -1;
}

std::string GpuTraceBuilder::outsidePhase(int64_t tsNs) const {
  if (m_foreign) return "external";
  if (stepAt(tsNs) >= 0) return "step";
  if (m_steps.empty() || tsNs < m_steps.begin()->second.startNs) return "setup";
  return "";
}

bool GpuTraceBuilder::isTrainerRange(const Range& range) const {
  if (m_foreign) return true;  // a foreign program's own ranges name its phases
  return range.domain == kEngineDomain &&
         (m_trainerThread == 0 || range.threadId == m_trainerThread);
}

// Pairs the trainer's "moewb" ranges (sorted by end) with the PhaseEvents of their step.
void GpuTraceBuilder::matchRanges(std::vector<Range*>& moewbRanges) {
  std::sort(moewbRanges.begin(), moewbRanges.end(),
            [](const Range* a, const Range* b) { return a->endNs < b->endNs; });
  // Per (step, name): the next PhaseEvent index to pair.
  std::map<std::pair<int64_t, std::string>, size_t> next;
  std::map<int64_t, std::map<std::string, std::vector<const engine::PhaseEvent*>>> byName;
  for (Range* range : moewbRanges) {
    range->step = stepAt(range->startNs);
    if (range->step < 0) continue;
    if (!byName.contains(range->step)) {
      auto& names = byName[range->step];
      for (const engine::PhaseEvent& e : m_phases[range->step]) {
        names[engine::phaseSliceName(e.phase, e.pass)].push_back(&e);
      }
    }
    const auto& events = byName[range->step][range->name];
    size_t& k = next[{range->step, range->name}];
    if (k < events.size()) {
      range->layer = events[k++]->layer;
    } else {
      m_counters.unmatchedRanges++;
    }
  }
  for (const auto& [step, names] : byName) {
    for (const auto& [name, events] : names) {
      const size_t used = next[{step, name}];
      if (used < events.size()) m_counters.unmatchedPhases += int64_t(events.size() - used);
    }
    m_phases.erase(step);
  }
}

void GpuTraceBuilder::resolveUntil(int64_t cutoffNs) {
  // Ranges and calls that started before the cutoff, per thread.
  std::map<uint32_t, std::vector<Range>> ranges;
  std::map<uint32_t, std::vector<ApiCall>> calls;
  std::vector<Range> laterRanges;
  for (Range& r : m_ranges) {
    if (m_foreign && r.startNs < cutoffNs && r.endNs >= cutoffNs) {
      // Written now, and kept (unwritten) so that calls after the cutoff still lie inside it.
      Range keep = r;
      keep.open = true;
      laterRanges.push_back(std::move(keep));
    }
    (r.startNs < cutoffNs ? ranges[r.threadId] : laterRanges).push_back(std::move(r));
  }
  m_ranges = std::move(laterRanges);
  if (m_foreign && cutoffNs != kNoCutoff) {
    for (const auto& [id, start] : m_openRanges) {
      if (start.tsNs >= cutoffNs) continue;
      Range open{start.tsNs, kNoCutoff, start.threadId, start.name, start.domain};
      open.open = true;
      ranges[start.threadId].push_back(std::move(open));
    }
  }
  std::vector<ApiCall> laterCalls;
  for (ApiCall& c : m_calls) {
    (c.startNs < cutoffNs ? calls[c.threadId] : laterCalls).push_back(std::move(c));
  }
  m_calls = std::move(laterCalls);

  if (!m_foreign) {  // a foreign program has no PhaseEvents to pair its ranges with
    std::vector<Range*> moewbRanges;
    for (auto& [thread, list] : ranges) {
      for (Range& r : list) {
        if (isTrainerRange(r)) moewbRanges.push_back(&r);
      }
    }
    matchRanges(moewbRanges);
  }

  m_attributionAge.emplace_back();
  m_callSpans.emplace_back();
  for (auto& [thread, list] : calls) resolveThread(thread, ranges[thread], list);
  std::sort(m_callSpans.back().begin(), m_callSpans.back().end(),
            [](const CallSpan& a, const CallSpan& b) { return a.startNs < b.startNs; });
  for (auto& [thread, list] : ranges) {
    if (!calls.contains(thread)) {
      std::vector<ApiCall> none;
      resolveThread(thread, list, none);
    }
  }
  std::vector<NvtxMarker> laterInstants;
  for (NvtxMarker& m : m_instants) {
    if (m.tsNs >= cutoffNs) {
      laterInstants.push_back(std::move(m));
      continue;
    }
    storage::SliceRow slice{SliceId(), apiTrack(m.threadId), m.tsNs, 0, m.name,
                            storage::kCategoryNvtx, stepAt(m.tsNs), -1, 0, 0};
    m_writer->addSlice(slice);
  }
  m_instants = std::move(laterInstants);

  std::vector<Record> laterDevice;
  for (Record& record : m_device) {
    if (startOf(record) >= cutoffNs) {
      laterDevice.push_back(std::move(record));
    } else {
      writeDevice(record);
    }
  }
  m_device = std::move(laterDevice);

  while (m_attributionAge.size() > kAttributionGenerations) {
    for (uint32_t id : m_attributionAge.front()) m_attribution.erase(id);
    m_attributionAge.pop_front();
  }
  while (m_callSpans.size() > kAttributionGenerations) m_callSpans.pop_front();
}

// Writes one thread's NVTX ranges and API calls (both started before the cutoff): a sweep in
// start order keeps the stack of open ranges; a call's innermost "moewb" range on the stack gives
// its attribution, the stack size its depth on the thread's track.
void GpuTraceBuilder::resolveThread(uint32_t threadId, std::vector<Range>& ranges,
                                    std::vector<ApiCall>& calls) {
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.startNs != b.startNs ? a.startNs < b.startNs : a.endNs > b.endNs;
  });
  std::sort(calls.begin(), calls.end(),
            [](const ApiCall& a, const ApiCall& b) { return a.startNs < b.startNs; });
  const TrackId track = apiTrack(threadId);
  std::vector<const Range*> stack;
  auto popEnded = [&](int64_t ts) {
    while (!stack.empty() && stack.back()->endNs < ts) stack.pop_back();
  };
  size_t r = 0;
  auto pushRangesUpTo = [&](int64_t ts) {
    for (; r < ranges.size() && ranges[r].startNs <= ts; ++r) {
      const Range& range = ranges[r];
      popEnded(range.startNs);
      if (!range.open) {
        const int64_t step = range.step >= 0 ? range.step : stepAt(range.startNs);
        storage::SliceRow slice{SliceId(), track, range.startNs, range.endNs - range.startNs,
                                range.name, storage::kCategoryNvtx, step, range.layer, 0,
                                int32_t(stack.size())};
        m_writer->addSlice(slice);
      }
      stack.push_back(&range);
    }
  };
  for (const ApiCall& call : calls) {
    pushRangesUpTo(call.startNs);
    popEnded(call.startNs);
    Attribution a;
    a.apiTrack = track;
    a.step = stepAt(call.startNs);
    const Range* phase = nullptr;
    for (auto it = stack.rbegin(); it != stack.rend() && phase == nullptr; ++it) {
      if (isTrainerRange(**it)) phase = *it;
    }
    if (phase != nullptr) {
      a.phase = phase->name;
      a.layer = phase->layer;
      if (phase->step >= 0) a.step = phase->step;
    } else {
      a.phase = outsidePhase(call.startNs);
    }
    storage::SliceRow slice{SliceId(), track, call.startNs, call.endNs - call.startNs, call.name,
                            storage::kCategoryApi, a.step, a.layer, int64_t(call.correlationId),
                            int32_t(stack.size())};
    storage::CudaApiRow row{call.driver ? "driver" : "runtime", int32_t(call.cbid),
                            int64_t(call.threadId), int32_t(call.returnValue), a.phase};
    m_writer->addCudaApi(slice, row);
    if (call.correlationId != 0) {
      m_attribution[call.correlationId] = a;
      m_attributionAge.back().push_back(call.correlationId);
    }
    m_callSpans.back().push_back({call.startNs, call.endNs, a});
  }
  pushRangesUpTo(kNoCutoff);
}

GpuTraceBuilder::Attribution GpuTraceBuilder::attributionFor(uint32_t correlationId,
                                                             int64_t tsNs) {
  if (correlationId == 0) {
    if (const Attribution* enclosing = callEnclosing(tsNs)) return *enclosing;
  } else if (auto it = m_attribution.find(correlationId); it != m_attribution.end()) {
    return it->second;
  }
  m_counters.unattributed++;
  Attribution a;
  a.step = stepAt(tsNs);
  a.phase = "";
  return a;
}

// The innermost (latest-starting) API call of the kept resolutions whose interval holds tsNs.
// Calls are short next to a resolution, so looking back over the last few calls that started
// before tsNs finds it; a long call (a synchronisation) that holds it is found only when no
// shorter call does.
const GpuTraceBuilder::Attribution* GpuTraceBuilder::callEnclosing(int64_t tsNs) const {
  constexpr int kLookBack = 64;
  const CallSpan* best = nullptr;
  for (const std::vector<CallSpan>& spans : m_callSpans) {
    auto after = std::upper_bound(spans.begin(), spans.end(), tsNs,
                                  [](int64_t ts, const CallSpan& s) { return ts < s.startNs; });
    int looked = 0;
    for (auto it = after; it != spans.begin() && looked < kLookBack; ++looked) {
      --it;
      if (it->endNs < tsNs) continue;
      if (best == nullptr || it->startNs > best->startNs) best = &*it;
      break;
    }
  }
  return best != nullptr ? &best->attribution : nullptr;
}

void GpuTraceBuilder::writeDevice(const Record& record) {
  using storage::SliceRow;
  if (const auto* k = std::get_if<KernelActivity>(&record)) {
    const Attribution a = attributionFor(k->correlationId, k->startNs);
    SliceRow slice{SliceId(), streamTrack(k->deviceId, k->streamId), k->startNs,
                   k->endNs - k->startNs, k->name, storage::kCategoryKernel, a.step, a.layer,
                   int64_t(k->correlationId), 0};
    storage::GpuKernelRow row;
    row.deviceId = int32_t(k->deviceId);
    row.streamId = k->streamId;
    row.gridX = k->grid[0], row.gridY = k->grid[1], row.gridZ = k->grid[2];
    row.blockX = k->block[0], row.blockY = k->block[1], row.blockZ = k->block[2];
    row.registersPerThread = k->registersPerThread;
    row.staticSharedBytes = k->staticSharedBytes;
    row.dynamicSharedBytes = k->dynamicSharedBytes;
    row.mangledName = k->mangledName;
    row.shortName = kernelShortName(k->name);
    row.phase = a.phase;
    m_writer->addGpuKernel(slice, row);
  } else if (const auto* c = std::get_if<MemcpyActivity>(&record)) {
    const Attribution a = attributionFor(c->correlationId, c->startNs);
    SliceRow slice{SliceId(), streamTrack(c->deviceId, c->streamId), c->startNs,
                   c->endNs - c->startNs, "memcpy", storage::kCategoryMemcpy, a.step, a.layer,
                   int64_t(c->correlationId), 0};
    m_writer->addGpuMemcpy(slice, {int32_t(c->deviceId), c->streamId, c->copyKind, c->srcKind,
                                   c->dstKind, c->bytes, a.phase});
  } else if (const auto* s = std::get_if<MemsetActivity>(&record)) {
    const Attribution a = attributionFor(s->correlationId, s->startNs);
    SliceRow slice{SliceId(), streamTrack(s->deviceId, s->streamId), s->startNs,
                   s->endNs - s->startNs, "memset", storage::kCategoryMemset, a.step, a.layer,
                   int64_t(s->correlationId), 0};
    m_writer->addGpuMemset(slice, {int32_t(s->deviceId), s->streamId, s->bytes, s->value,
                                   s->memoryKind, a.phase});
  } else if (const auto* y = std::get_if<SyncActivity>(&record)) {
    Attribution a = attributionFor(y->correlationId, y->startNs);
    if (!a.apiTrack.isValid()) a.apiTrack = apiTrack(0);
    SliceRow slice{SliceId(), a.apiTrack, y->startNs, y->endNs - y->startNs, "synchronize",
                   storage::kCategorySync, a.step, a.layer, int64_t(y->correlationId), 0};
    m_writer->addGpuSync(slice, {y->syncType, y->streamId, y->cudaEventId, a.phase});
  } else if (const auto* m = std::get_if<MemoryActivity>(&record)) {
    const Attribution a = attributionFor(m->correlationId, m->tsNs);
    storage::GpuMemoryRow row;
    row.track = a.apiTrack;
    row.tsNs = m->tsNs;
    row.isAllocation = m->isAllocation;
    row.memoryKind = m->memoryKind;
    row.bytes = m->bytes;
    row.address = m->address;
    row.deviceId = int32_t(m->deviceId);
    row.streamId = m->streamId;
    row.correlationId = m->correlationId;
    row.step = a.step;
    row.layer = a.layer;
    row.phase = a.phase;
    m_writer->addGpuMemory(row);
  }
}

TrackId GpuTraceBuilder::streamTrack(uint32_t deviceId, int64_t streamId) {
  auto [it, inserted] = m_streamTracks.try_emplace({deviceId, streamId});
  if (inserted) {
    storage::TrackRow track;
    track.name = "GPU " + std::to_string(deviceId) + " stream " + std::to_string(streamId);
    track.kind = storage::kTrackKindStream;
    track.rank = m_rank;
    track.threadId = streamId;
    it->second = m_writer->addTrack(track);
  }
  return it->second;
}

TrackId GpuTraceBuilder::apiTrack(uint32_t threadId) {
  auto [it, inserted] = m_apiTracks.try_emplace(threadId);
  if (inserted) {
    storage::TrackRow track;
    track.name = threadId == 0 ? "CUDA API (thread unknown)"
                               : "CUDA API thread " + std::to_string(threadId);
    track.kind = storage::kTrackKindCudaApi;
    track.rank = m_rank;
    track.threadId = threadId;
    it->second = m_writer->addTrack(track);
  }
  return it->second;
}

}  // namespace moewb::profiler::gpu
