// The reader's GPU queries: the CUDA API and stream lanes of a time window (downsampled by
// folding slices shorter than one bucket), the details of one GPU slice with the API call that
// launched it (or, for an API call, of the work it launched), every slice streamed with its GPU
// detail row (for exports), and the expert load of one (step, layer). Lanes read each lane
// track's slices through the slice(track, start_ns) index; details are primary-key probes plus one probe of the correlation
// index; the layer load is one range of expert_load(step, layer). Files written before the GPU
// tables existed give no lanes and no details.
#include <algorithm>
#include <limits>

#include "sqlite_trace_reader.h"

namespace moewb::storage {

std::string GpuSliceDetails::phase() const {
  if (kernel) return kernel->phase;
  if (memcpy) return memcpy->phase;
  if (memset) return memset->phase;
  return {};
}

namespace detail {

namespace {

// The lanes' tracks: per rank its CUDA API threads (?1), then its streams (?2).
constexpr const char* kGpuLaneTracksSql =
    "SELECT id, name, kind, rank, thread_id FROM track WHERE kind IN (?1, ?2) "
    "ORDER BY rank, kind = ?2, id";

// ?1 = lowest start to scan, ?2 = window end (exclusive), ?3 = window start, ?4 = track.
constexpr const char* kGpuLaneSql =
    "SELECT s.id, s.start_ns, s.dur_ns, coalesce(n.text, ''), coalesce(c.text, ''), s.step, "
    "s.layer, s.correlation_id, coalesce(kn.text, '') "
    "FROM slice s LEFT JOIN string n ON n.id = s.name LEFT JOIN string c ON c.id = s.category "
    "LEFT JOIN gpu_kernel k ON k.slice = s.id LEFT JOIN string kn ON kn.id = k.short_name "
    "WHERE s.track = ?4 AND s.start_ns >= ?1 AND s.start_ns < ?2 AND s.start_ns + s.dur_ns > ?3 "
    "AND coalesce(c.text, '') <> 'nvtx' "
    "ORDER BY s.start_ns, s.id";

// The GPU work (kernel, memcpy, memset) that API call ?1 launched: same correlation id, same
// rank (correlation ids are per process). The implied `w.correlation_id != 0` lets SQLite use
// the partial index slice_correlation_idx (without it the query scans slice).
constexpr const char* kLaunchedWorkSql =
    "SELECT w.id FROM slice a JOIN track ta ON ta.id = a.track "
    "JOIN string ca ON ca.id = a.category "
    "JOIN slice w ON w.correlation_id = a.correlation_id JOIN track tw ON tw.id = w.track "
    "JOIN string cw ON cw.id = w.category "
    "WHERE a.id = ?1 AND ca.text = 'api' AND a.correlation_id != 0 AND w.correlation_id != 0 "
    "AND tw.rank = ta.rank "
    "AND cw.text IN ('kernel', 'memcpy', 'memset') ORDER BY w.id LIMIT 1";

constexpr const char* kSliceByIdSql =
    "SELECT s.id, s.track, s.start_ns, s.dur_ns, coalesce(n.text, ''), coalesce(c.text, ''), "
    "s.step, s.layer, s.correlation_id, s.depth "
    "FROM slice s LEFT JOIN string n ON n.id = s.name LEFT JOIN string c ON c.id = s.category "
    "WHERE s.id = ?1";

constexpr const char* kKernelSql =
    "SELECT k.device_id, k.stream_id, k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, "
    "k.block_z, k.registers_per_thread, k.static_shared_bytes, k.dynamic_shared_bytes, "
    "coalesce(m.text, ''), coalesce(sn.text, ''), coalesce(p.text, '') FROM gpu_kernel k "
    "LEFT JOIN string m ON m.id = k.mangled_name LEFT JOIN string sn ON sn.id = k.short_name "
    "LEFT JOIN string p ON p.id = k.phase WHERE k.slice = ?1";

constexpr const char* kMemcpySql =
    "SELECT m.device_id, m.stream_id, m.copy_kind, m.src_kind, m.dst_kind, m.bytes, "
    "coalesce(p.text, '') FROM gpu_memcpy m LEFT JOIN string p ON p.id = m.phase "
    "WHERE m.slice = ?1";

constexpr const char* kMemsetSql =
    "SELECT m.device_id, m.stream_id, m.bytes, m.value, m.memory_kind, coalesce(p.text, '') "
    "FROM gpu_memset m LEFT JOIN string p ON p.id = m.phase WHERE m.slice = ?1";

// The API call with correlation id ?1 on a track of rank ?2 (correlation ids are per process);
// `!= 0` as above, for the partial index.
constexpr const char* kApiCallSql =
    "SELECT s.id, s.track, s.start_ns, s.dur_ns, coalesce(n.text, ''), coalesce(c.text, ''), "
    "s.step, s.layer, s.correlation_id, s.depth, a.api, a.cbid, a.thread_id, a.return_value, "
    "coalesce(p.text, '') "
    "FROM slice s JOIN cuda_api a ON a.slice = s.id JOIN track t ON t.id = s.track "
    "LEFT JOIN string n ON n.id = s.name LEFT JOIN string c ON c.id = s.category "
    "LEFT JOIN string p ON p.id = a.phase "
    "WHERE s.correlation_id = ?1 AND s.correlation_id != 0 AND t.rank = ?2 ORDER BY s.id LIMIT 1";

constexpr const char* kLayerLoadSql =
    "SELECT expert, sum(tokens), sum(dropped) FROM expert_load WHERE step = ?1 AND layer = ?2 "
    "GROUP BY expert ORDER BY expert";

// Every slice with its kernel, memcpy and memset detail columns (NULL where it has none), in
// forEachSlice's order. Detail columns start at 10: kernel 10-22 (21 = phase, 22 = present),
// memcpy 23-30 (30 = present), memset 31-37 (37 = present).
constexpr const char* kSlicesWithGpuWorkSql =
    "SELECT s.id, s.track, s.start_ns, s.dur_ns, coalesce(n.text, ''), coalesce(c.text, ''), "
    "s.step, s.layer, s.correlation_id, s.depth, "
    "k.device_id, k.stream_id, k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, "
    "k.registers_per_thread, k.static_shared_bytes, k.dynamic_shared_bytes, "
    "coalesce(kp.text, ''), k.slice IS NOT NULL, "
    "m.device_id, m.stream_id, m.copy_kind, m.src_kind, m.dst_kind, m.bytes, "
    "coalesce(mp.text, ''), m.slice IS NOT NULL, "
    "z.device_id, z.stream_id, z.bytes, z.value, z.memory_kind, coalesce(zp.text, ''), "
    "z.slice IS NOT NULL "
    "FROM slice s LEFT JOIN string n ON n.id = s.name LEFT JOIN string c ON c.id = s.category "
    "LEFT JOIN gpu_kernel k ON k.slice = s.id LEFT JOIN string kp ON kp.id = k.phase "
    "LEFT JOIN gpu_memcpy m ON m.slice = s.id LEFT JOIN string mp ON mp.id = m.phase "
    "LEFT JOIN gpu_memset z ON z.slice = s.id LEFT JOIN string zp ON zp.id = z.phase "
    "ORDER BY s.start_ns, s.id";

// A kernel row from the columns starting at `first`: device, stream, grid xyz, block xyz,
// registers, static and dynamic shared bytes (names and phase are set by the caller).
GpuKernelRow kernelFromColumns(const Statement& q, int first) {
  GpuKernelRow k;
  k.deviceId = q.columnInt32(first);
  k.streamId = q.columnInt(first + 1);
  k.gridX = q.columnInt32(first + 2);
  k.gridY = q.columnInt32(first + 3);
  k.gridZ = q.columnInt32(first + 4);
  k.blockX = q.columnInt32(first + 5);
  k.blockY = q.columnInt32(first + 6);
  k.blockZ = q.columnInt32(first + 7);
  k.registersPerThread = q.columnInt32(first + 8);
  k.staticSharedBytes = q.columnInt32(first + 9);
  k.dynamicSharedBytes = q.columnInt32(first + 10);
  return k;
}

// device, stream, copy kind, source kind, destination kind, bytes, phase.
GpuMemcpyRow memcpyFromColumns(const Statement& q, int first) {
  return GpuMemcpyRow{q.columnInt32(first),     q.columnInt(first + 1),
                      q.columnInt32(first + 2), q.columnInt32(first + 3),
                      q.columnInt32(first + 4), q.columnInt(first + 5),
                      q.columnText(first + 6)};
}

// device, stream, bytes, value, memory kind, phase.
GpuMemsetRow memsetFromColumns(const Statement& q, int first) {
  return GpuMemsetRow{q.columnInt32(first),     q.columnInt(first + 1),
                      q.columnInt(first + 2),          q.columnInt32(first + 3),
                      q.columnInt32(first + 4), q.columnText(first + 5)};
}

// kKernelSql's row: the kernel columns, then its mangled and short names and phase.
GpuKernelRow kernelDetailsFromColumns(const Statement& q) {
  GpuKernelRow k = kernelFromColumns(q, 0);
  k.mangledName = q.columnText(11);
  k.shortName = q.columnText(12);
  k.phase = q.columnText(13);
  return k;
}

GpuMemcpyRow memcpyDetailsFromColumns(const Statement& q) {
  return memcpyFromColumns(q, 0);
}

GpuMemsetRow memsetDetailsFromColumns(const Statement& q) {
  return memsetFromColumns(q, 0);
}

// kApiCallSql's row: the slice columns, then api, cbid, thread id, return value and phase.
struct ApiCall {
  SliceRow slice;
  CudaApiRow details;
};

ApiCall apiCallFromColumns(const Statement& q) {
  return ApiCall{sliceFromColumns(q),
                 CudaApiRow{q.columnText(10), q.columnInt32(11), q.columnInt(12), q.columnInt32(13),
                            q.columnText(14)}};
}

int64_t lowestStartToScan(int64_t startNs, int64_t maxDurNs) {
  return startNs < std::numeric_limits<int64_t>::min() + maxDurNs
             ? std::numeric_limits<int64_t>::min()
             : startNs - maxDurNs;
}

// Folds runs of short slices of one lane (see TraceReader::gpuLanes).
class LaneFolder {
 public:
  LaneFolder(std::vector<GpuLaneItem>* out, double bucketNs) : m_out(out), m_bucketNs(bucketNs) {}
  void add(GpuLaneItem item) {
    const bool narrow = double(item.durNs()) < m_bucketNs;
    // The gap in double: start and end come from the file, and their difference can leave int64.
    if (m_open && narrow && double(item.startNs) - double(m_fold.endNs) < m_bucketNs) {
      m_fold.count++;
      m_fold.endNs = std::max(m_fold.endNs, item.endNs);
      if (m_fold.category != item.category) m_fold.category = "mixed";
      return;
    }
    flush();
    if (narrow) {
      m_fold = std::move(item);
      m_open = true;
    } else {
      m_out->push_back(std::move(item));
    }
  }
  void flush() {
    if (!m_open) return;
    if (m_fold.count > 1) {
      m_fold.name.clear();
      m_fold.shortName.clear();
    }
    m_out->push_back(std::move(m_fold));
    m_open = false;
  }

 private:
  std::vector<GpuLaneItem>* m_out;
  double m_bucketNs;
  GpuLaneItem m_fold;
  bool m_open = false;
};

}  // namespace

Result<std::vector<GpuLane>> SqliteTraceReader::gpuLanes(TimeWindow window, int32_t buckets,
                                                         std::optional<TrackId> track) {
  return inReadTransaction<std::vector<GpuLane>>(
      [&] { return gpuLanesInSnapshot(window, buckets, track); });
}

Result<std::vector<GpuLane>> SqliteTraceReader::gpuLanesInSnapshot(TimeWindow window,
                                                                   int32_t buckets,
                                                                   std::optional<TrackId> track) {
  std::vector<GpuLane> lanes;
  MOEWB_ASSIGN_OR_RETURN(const bool hasKernels, tableExists(m_db, "gpu_kernel"));
  if (!hasKernels) return lanes;
  MOEWB_RETURN_IF_ERROR(queryEachRow(
      m_db, kGpuLaneTracksSql,
      [&](const Statement& s) {
        TrackRow row = trackFromColumns(s);
        if (!track || row.id == *track) lanes.push_back({std::move(row), {}});
      },
      std::string(kTrackKindCudaApi), std::string(kTrackKindStream)));
  if (window.endNs <= window.startNs || lanes.empty()) return lanes;
  const double bucketNs =
      (double(window.endNs) - double(window.startNs)) / double(std::max<int32_t>(buckets, 1));
  MOEWB_ASSIGN_OR_RETURN(const int64_t maxDurNs, maxSliceDurNs());
  MOEWB_ASSIGN_OR_RETURN(Statement query, Statement::prepare(m_db, kGpuLaneSql));
  for (GpuLane& lane : lanes) {
    MOEWB_RETURN_IF_ERROR(query.bindAll(lowestStartToScan(window.startNs, maxDurNs), window.endNs,
                                        window.startNs, lane.track.id.value));
    LaneFolder folder(&lane.items, bucketNs);
    int64_t clamped = 0;
    MOEWB_RETURN_IF_ERROR(forEachRow(query, [&](const Statement& s) {
      GpuLaneItem item;
      item.id = SliceId(s.columnInt(0));
      item.track = lane.track.id;
      item.startNs = s.columnInt(1);
      item.endNs = saturatingAdd(item.startNs, s.columnInt(2), &clamped);
      item.name = s.columnText(3);
      item.category = s.columnText(4);
      item.step = s.columnInt(5);
      item.layer = s.columnInt32(6);
      item.correlationId = s.columnInt(7);
      item.shortName = s.columnText(8);
      folder.add(std::move(item));
    }));
    folder.flush();
    countClamped(clamped);
  }
  return lanes;
}

Result<std::optional<GpuSliceDetails>> SqliteTraceReader::gpuSliceDetails(SliceId slice) {
  return inReadTransaction<std::optional<GpuSliceDetails>>(
      [&]() -> Result<std::optional<GpuSliceDetails>> {
        std::optional<GpuSliceDetails> none;
        MOEWB_ASSIGN_OR_RETURN(const bool hasGpuTables, tableExists(m_db, "gpu_kernel"));
        if (!hasGpuTables) return none;
        // An API call stands for the work it launched.
        MOEWB_ASSIGN_OR_RETURN(const std::optional<int64_t> launched,
                               queryFirstRow(m_db, kLaunchedWorkSql, column0Int, slice.value));
        const int64_t work = launched.value_or(slice.value);
        MOEWB_ASSIGN_OR_RETURN(std::optional<SliceRow> workSlice,
                               queryFirstRow(m_db, kSliceByIdSql, sliceFromColumns, work));
        if (!workSlice) return none;
        GpuSliceDetails details;
        details.slice = std::move(*workSlice);
        MOEWB_ASSIGN_OR_RETURN(details.kernel,
                               queryFirstRow(m_db, kKernelSql, kernelDetailsFromColumns, work));
        if (!details.kernel) {
          MOEWB_ASSIGN_OR_RETURN(details.memcpy,
                                 queryFirstRow(m_db, kMemcpySql, memcpyDetailsFromColumns, work));
        }
        if (!details.kernel && !details.memcpy) {
          MOEWB_ASSIGN_OR_RETURN(details.memset,
                                 queryFirstRow(m_db, kMemsetSql, memsetDetailsFromColumns, work));
        }
        if (!details.kernel && !details.memcpy && !details.memset) return none;
        MOEWB_ASSIGN_OR_RETURN(
            std::optional<TrackRow> track,
            queryFirstRow(m_db, "SELECT id, name, kind, rank, thread_id FROM track WHERE id = ?1",
                          trackFromColumns, details.slice.track.value));
        if (track) details.track = std::move(*track);
        if (details.slice.correlationId != 0) {
          MOEWB_ASSIGN_OR_RETURN(
              std::optional<ApiCall> api,
              queryFirstRow(m_db, kApiCallSql, apiCallFromColumns, details.slice.correlationId,
                            int64_t(details.track.rank)));
          if (api) {
            details.apiCall = std::move(api->slice);
            details.apiDetails = std::move(api->details);
          }
        }
        return std::optional<GpuSliceDetails>(std::move(details));
      });
}

Status SqliteTraceReader::forEachSliceWithGpuWork(
    const std::function<bool(const SliceRow&, const GpuWorkRow*)>& visit) {
  MOEWB_ASSIGN_OR_RETURN(const bool hasGpuTables, tableExists(m_db, "gpu_kernel"));
  if (!hasGpuTables) {
    return forEachSlice([&](const SliceRow& slice) { return visit(slice, nullptr); });
  }
  return queryEachRow(m_db, kSlicesWithGpuWorkSql, [&](const Statement& q) {
    const SliceRow slice = sliceFromColumns(q);
    GpuWorkRow work;
    if (q.columnInt(22) != 0) {
      work.kernel = kernelFromColumns(q, 10);
      work.kernel->phase = q.columnText(21);
    } else if (q.columnInt(30) != 0) {
      work.memcpy = memcpyFromColumns(q, 23);
    } else if (q.columnInt(37) != 0) {
      work.memset = memsetFromColumns(q, 31);
    }
    const bool isWork = work.kernel || work.memcpy || work.memset;
    return visit(slice, isWork ? &work : nullptr);
  });
}

Result<std::optional<LayerLoad>> SqliteTraceReader::layerLoad(int64_t step, int32_t layer) {
  LayerLoad load;
  load.step = step;
  load.layer = layer;
  bool any = false;
  MOEWB_RETURN_IF_ERROR(queryEachRow(
      m_db, kLayerLoadSql,
      [&](const Statement& q) {
        const int64_t expert = q.columnInt(0);
        if (expert < 0 || expert > (1 << 20)) return;  // untrusted file: no giant vectors
        any = true;
        if (size_t(expert) >= load.tokens.size()) {
          load.tokens.resize(size_t(expert) + 1, 0);
          load.dropped.resize(size_t(expert) + 1, 0);
        }
        load.tokens[size_t(expert)] = q.columnInt(1);
        load.dropped[size_t(expert)] = q.columnInt(2);
      },
      step, int64_t(layer)));
  if (!any) return std::optional<LayerLoad>{};
  int64_t clamped = 0;  // token counts come from the file: the total saturates
  for (size_t e = 0; e < load.tokens.size(); ++e) {
    load.totalTokens = saturatingAdd(load.totalTokens, load.tokens[e], &clamped);
    if (load.tokens[e] > load.tokens[size_t(load.hottestExpert)]) load.hottestExpert = int32_t(e);
  }
  if (load.totalTokens > 0) {
    const double mean = double(load.totalTokens) / double(load.tokens.size());
    load.maxOverMean = double(load.tokens[size_t(load.hottestExpert)]) / mean;
  }
  countClamped(clamped);
  return std::optional<LayerLoad>(std::move(load));
}

}  // namespace detail
}  // namespace moewb::storage
