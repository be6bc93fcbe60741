// Schema v1 of the trace store as SQL, plus the meta rows every new trace gets.
//
// Conventions: times are int64 ns on CLOCK_MONOTONIC (columns *_ns), bytes are int64, names that
// repeat a lot (slice and counter names, categories) are ids into `string`. No CHECK constraints
// on caller-provided values: a bad value must not turn into a write error that drops the rest of
// the trace. Views carry Nsight Systems' table names so SQL written for nsys exports runs here.
#include "schema.h"

#include <unistd.h>

#include <climits>
#include <string>

#include "moewb/base/units.h"
#include "moewb/storage/run_liveness.h"
#include "moewb/storage/trace_reader.h"

#ifndef MOEWB_TOOL_VERSION
#define MOEWB_TOOL_VERSION "unknown"
#endif

namespace moewb::storage::detail {

namespace {

constexpr const char* kSchemaSqlV1 = R"sql(
CREATE TABLE meta (
  key TEXT PRIMARY KEY NOT NULL,
  value TEXT NOT NULL
);
CREATE TABLE run (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  config_toml TEXT NOT NULL,
  backend TEXT NOT NULL,
  world_size INTEGER NOT NULL,
  start_ns INTEGER NOT NULL,
  start_unix_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL DEFAULT 0,
  status TEXT NOT NULL,          -- running, completed, stopped, failed
  message TEXT NOT NULL DEFAULT ''
);
CREATE TABLE string (
  id INTEGER PRIMARY KEY,
  text TEXT NOT NULL UNIQUE
);
CREATE TABLE track (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  kind TEXT NOT NULL,            -- thread, counter, stream, comm, memory
  rank INTEGER NOT NULL,
  thread_id INTEGER NOT NULL     -- OS thread id or stream id
);
CREATE TABLE slice (
  id INTEGER PRIMARY KEY,
  track INTEGER NOT NULL,        -- track.id
  start_ns INTEGER NOT NULL,
  dur_ns INTEGER NOT NULL,
  name INTEGER NOT NULL,         -- string.id
  category INTEGER NOT NULL,     -- string.id: step, phase, kernel, memcpy, collective, nvtx, ...
  step INTEGER NOT NULL DEFAULT -1,
  layer INTEGER NOT NULL DEFAULT -1,
  correlation_id INTEGER NOT NULL DEFAULT 0,
  depth INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX slice_start_idx ON slice(start_ns);
CREATE INDEX slice_track_start_idx ON slice(track, start_ns);
CREATE TABLE counter (
  id INTEGER PRIMARY KEY,
  track INTEGER NOT NULL,        -- track.id of kind counter
  name INTEGER NOT NULL,         -- string.id
  ts_ns INTEGER NOT NULL,
  value REAL NOT NULL
);
CREATE INDEX counter_track_ts_idx ON counter(track, ts_ns);
CREATE TABLE memory_event (
  id INTEGER PRIMARY KEY,
  track INTEGER NOT NULL,        -- track.id of kind memory (a rank's device memory)
  ts_ns INTEGER NOT NULL,
  step INTEGER NOT NULL DEFAULT -1,
  kind TEXT NOT NULL,            -- alloc, free
  bytes INTEGER NOT NULL,
  address INTEGER NOT NULL,      -- device address (0 for the baseline of blocks held at start)
  category INTEGER NOT NULL,     -- string.id: weights, grads, optimizer, activations, ...
  in_use_bytes INTEGER NOT NULL DEFAULT 0  -- the category's bytes in use after this event
);
CREATE INDEX memory_event_ts_idx ON memory_event(ts_ns);
-- Per-category time series: the window and "value before the window" queries are range scans
-- and probes of this covering index.
CREATE INDEX memory_event_series_idx ON memory_event(track, category, ts_ns, id, in_use_bytes);
CREATE TABLE step (
  run INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  step INTEGER NOT NULL,
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  loss REAL NOT NULL,
  aux_loss REAL NOT NULL,
  tokens INTEGER NOT NULL,
  tokens_per_second REAL NOT NULL,
  peak_bytes INTEGER NOT NULL,
  grad_norm REAL NOT NULL,
  lr REAL NOT NULL,
  PRIMARY KEY (run, rank, step)
) WITHOUT ROWID;
CREATE TABLE expert_load (
  step INTEGER NOT NULL,
  layer INTEGER NOT NULL,
  expert INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  tokens INTEGER NOT NULL,
  dropped INTEGER NOT NULL,
  bias REAL NOT NULL
);
CREATE INDEX expert_load_step_layer_idx ON expert_load(step, layer);
CREATE TABLE a2a_traffic (
  step INTEGER NOT NULL,
  layer INTEGER NOT NULL,
  src_rank INTEGER NOT NULL,
  dst_rank INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  phase TEXT NOT NULL            -- dispatch, combine
);
CREATE INDEX a2a_traffic_step_layer_idx ON a2a_traffic(step, layer);
CREATE TABLE collective (
  id INTEGER PRIMARY KEY,
  track INTEGER NOT NULL,        -- track.id of the rank's comm track (slice at the same start_ns)
  start_ns INTEGER NOT NULL,
  dur_ns INTEGER NOT NULL,
  step INTEGER NOT NULL,
  layer INTEGER NOT NULL,        -- -1 outside the layers
  rank INTEGER NOT NULL,         -- global rank that ran it
  op TEXT NOT NULL,              -- all_gather, reduce_scatter, all_reduce, all_to_all_v, ...
  comm_group TEXT NOT NULL,      -- world, ep, expert_dp, fsdp, replicate
  phase TEXT NOT NULL,           -- EP all-to-all: dispatch, combine, combine.bwd, dispatch.bwd
  seq INTEGER NOT NULL,          -- per-group sequence number, equal on every peer
  bytes_sent INTEGER NOT NULL,
  bytes_received INTEGER NOT NULL,
  peers TEXT NOT NULL,           -- global ranks of the group, comma-separated, in group order
  ok INTEGER NOT NULL            -- 0 when the collective failed
);
CREATE INDEX collective_step_rank_idx ON collective(step, rank);
-- Swap (activation offload to pinned host memory; engine/include/moewb/engine/swap.h). A plan
-- with the profile it was made from (per layer and per candidate tensor), every copy, and the
-- per-step watermarks. Times on the slices' clock; bytes int64; ms as REAL.
CREATE TABLE swap_plan (
  id INTEGER PRIMARY KEY,
  run INTEGER NOT NULL,
  step INTEGER NOT NULL,         -- first step that runs the plan
  rank INTEGER NOT NULL,
  mode TEXT NOT NULL,            -- off, manual, auto
  hbm_target_bytes INTEGER NOT NULL,
  pinned_budget_bytes INTEGER NOT NULL,
  prefetch_layers INTEGER NOT NULL,
  d2h_gbps REAL NOT NULL,
  h2d_gbps REAL NOT NULL,
  bidir_gbps REAL NOT NULL,
  fixed_bytes INTEGER NOT NULL,
  turn_ms REAL NOT NULL,
  predicted_peak_bytes INTEGER NOT NULL,
  predicted_peak_no_swap_bytes INTEGER NOT NULL,
  predicted_exposed_ms REAL NOT NULL,
  summary TEXT NOT NULL,
  free_lag_layers INTEGER NOT NULL DEFAULT 1,  -- swap.free_lag_layers (1: files before it)
  ops TEXT NOT NULL DEFAULT '',                -- swap.ops, comma list; '' = all ops
  min_bytes INTEGER NOT NULL DEFAULT 0,        -- swap.min_bytes (0 with the two above: unknown)
  recompute_ops TEXT NOT NULL DEFAULT '',      -- swap.recompute_ops, comma list; '' = none
  recompute_ms_source TEXT NOT NULL DEFAULT '' -- swap_plan_layer.recompute_ms: 'measured' (mean
                                               -- of the layers' measured times) or 'estimate'
                                               -- (FLOPs); '': unknown (files before them)
);
CREATE TABLE swap_plan_layer (
  plan INTEGER NOT NULL,         -- swap_plan.id
  layer INTEGER NOT NULL,
  forward_ms REAL NOT NULL,
  backward_ms REAL NOT NULL,
  other_bytes INTEGER NOT NULL,  -- saved bytes of the layer that are no candidate
  recompute_ms REAL NOT NULL DEFAULT 0,  -- cost of recomputing the layer (see recompute_ms_source)
  PRIMARY KEY (plan, layer)
) WITHOUT ROWID;
CREATE TABLE swap_plan_tensor (
  plan INTEGER NOT NULL,         -- swap_plan.id
  idx INTEGER NOT NULL,          -- position in the profile (forward order)
  layer INTEGER NOT NULL,
  op TEXT NOT NULL,              -- attn_norm, mixer_input, moe_norm, moe_input, expert_fc1, ...
  bytes INTEGER NOT NULL,
  swapped INTEGER NOT NULL,      -- 1: the plan swaps it, 2: recomputes it, 0: keeps it
  reason TEXT NOT NULL,
  PRIMARY KEY (plan, idx)
) WITHOUT ROWID;
CREATE TABLE swap_event (
  id INTEGER PRIMARY KEY,
  run INTEGER NOT NULL,
  step INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  layer INTEGER NOT NULL,
  op TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  to_host INTEGER NOT NULL,      -- 1: D2H offload, 0: H2D reload
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  needed_ns INTEGER NOT NULL,    -- reload: consumer ready; offload: compute at its wait, or 0
  stall_ns INTEGER NOT NULL,     -- compute wait: reload stall or offload wait (late when > 0)
  simulated INTEGER NOT NULL     -- 1: the CPU backend's simulated tier
);
CREATE INDEX swap_event_start_idx ON swap_event(start_ns);
CREATE INDEX swap_event_step_rank_idx ON swap_event(step, rank);
CREATE TABLE swap_step (
  run INTEGER NOT NULL,
  step INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  hbm_peak_bytes INTEGER NOT NULL,
  hbm_peak_no_swap_bytes INTEGER NOT NULL,
  pinned_peak_bytes INTEGER NOT NULL,
  pinned_capacity_bytes INTEGER NOT NULL,
  offloads INTEGER NOT NULL,
  reloads INTEGER NOT NULL,
  late_reloads INTEGER NOT NULL,
  swapped_bytes INTEGER NOT NULL,
  copy_ms REAL NOT NULL,
  exposed_ms REAL NOT NULL,
  simulated INTEGER NOT NULL,
  PRIMARY KEY (run, step, rank)
) WITHOUT ROWID;
CREATE TABLE config_change (
  id INTEGER PRIMARY KEY,
  run INTEGER NOT NULL,
  step INTEGER NOT NULL,         -- first step that uses the new value
  ts_ns INTEGER NOT NULL,
  key TEXT NOT NULL,
  old_value TEXT NOT NULL,
  new_value TEXT NOT NULL,
  source TEXT NOT NULL           -- cli, gui, tuner
);
CREATE TABLE stats (
  name TEXT NOT NULL UNIQUE,
  severity TEXT NOT NULL,        -- info, warning, error, data_loss
  value INTEGER NOT NULL,
  description TEXT NOT NULL
);
CREATE TABLE tuner_trial (
  id INTEGER PRIMARY KEY,
  run INTEGER NOT NULL,
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  settings_json TEXT NOT NULL,
  metrics_json TEXT NOT NULL,
  verdict TEXT NOT NULL
);
-- GPU activity (CUPTI): kernels, copies, memsets, synchronisations and API calls are slices
-- (kernel/memcpy/memset on a track of kind stream, sync/api/nvtx on a track of kind cuda_api) with
-- one detail row keyed by slice.id. Enumerations hold CUPTI's values (gpu_rows.h); phase is a
-- string.id of the engine phase the work ran under.
CREATE TABLE gpu_kernel (
  slice INTEGER PRIMARY KEY,     -- slice.id (category kernel; slice.name = demangled name)
  device_id INTEGER NOT NULL,
  stream_id INTEGER NOT NULL,
  grid_x INTEGER NOT NULL, grid_y INTEGER NOT NULL, grid_z INTEGER NOT NULL,
  block_x INTEGER NOT NULL, block_y INTEGER NOT NULL, block_z INTEGER NOT NULL,
  registers_per_thread INTEGER NOT NULL,
  static_shared_bytes INTEGER NOT NULL,
  dynamic_shared_bytes INTEGER NOT NULL,
  mangled_name INTEGER NOT NULL, -- string.id
  short_name INTEGER NOT NULL,   -- string.id
  phase INTEGER NOT NULL         -- string.id
);
CREATE TABLE gpu_memcpy (
  slice INTEGER PRIMARY KEY,
  device_id INTEGER NOT NULL,
  stream_id INTEGER NOT NULL,
  copy_kind INTEGER NOT NULL,    -- CUpti_ActivityMemcpyKind: 1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP, ...
  src_kind INTEGER NOT NULL,     -- CUpti_ActivityMemoryKind: 1 pageable, 2 pinned, 3 device, ...
  dst_kind INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  phase INTEGER NOT NULL
);
CREATE TABLE gpu_memset (
  slice INTEGER PRIMARY KEY,
  device_id INTEGER NOT NULL,
  stream_id INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  value INTEGER NOT NULL,
  memory_kind INTEGER NOT NULL,
  phase INTEGER NOT NULL
);
CREATE TABLE gpu_sync (
  slice INTEGER PRIMARY KEY,
  sync_type INTEGER NOT NULL,    -- 1 event sync, 2 stream wait event, 3 stream sync, 4 device sync
  stream_id INTEGER NOT NULL,
  cuda_event_id INTEGER NOT NULL,
  phase INTEGER NOT NULL
);
CREATE TABLE cuda_api (
  slice INTEGER PRIMARY KEY,     -- slice.name = function name, slice.correlation_id links the work
  api TEXT NOT NULL,             -- runtime, driver
  cbid INTEGER NOT NULL,
  thread_id INTEGER NOT NULL,
  return_value INTEGER NOT NULL,
  phase INTEGER NOT NULL
);
CREATE TABLE gpu_memory (
  id INTEGER PRIMARY KEY,
  track INTEGER NOT NULL,        -- track.id of the API thread, -1 when unknown
  ts_ns INTEGER NOT NULL,
  kind TEXT NOT NULL,            -- alloc, free
  memory_kind INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  address INTEGER NOT NULL,
  device_id INTEGER NOT NULL,
  stream_id INTEGER NOT NULL,
  correlation_id INTEGER NOT NULL,
  step INTEGER NOT NULL,
  layer INTEGER NOT NULL,
  phase INTEGER NOT NULL
);
CREATE INDEX gpu_memory_ts_idx ON gpu_memory(ts_ns);
CREATE INDEX slice_correlation_idx ON slice(correlation_id) WHERE correlation_id != 0;
CREATE VIEW StringIds AS SELECT id, text AS value FROM string;
-- Nsight Systems' CUPTI tables (same names and columns; times in ns on CLOCK_MONOTONIC), plus our
-- attribution columns step, layer and phase (a StringIds id).
CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS
  SELECT s.start_ns AS start, s.start_ns + s.dur_ns AS "end", k.device_id AS deviceId,
         0 AS contextId, k.stream_id AS streamId, s.correlation_id AS correlationId,
         k.grid_x AS gridX, k.grid_y AS gridY, k.grid_z AS gridZ,
         k.block_x AS blockX, k.block_y AS blockY, k.block_z AS blockZ,
         k.registers_per_thread AS registersPerThread,
         k.static_shared_bytes AS staticSharedMemory, k.dynamic_shared_bytes AS dynamicSharedMemory,
         s.name AS demangledName, k.short_name AS shortName, k.mangled_name AS mangledName,
         s.step AS step, s.layer AS layer, k.phase AS phase
  FROM gpu_kernel k JOIN slice s ON s.id = k.slice;
CREATE VIEW CUPTI_ACTIVITY_KIND_MEMCPY AS
  SELECT s.start_ns AS start, s.start_ns + s.dur_ns AS "end", m.device_id AS deviceId,
         0 AS contextId, m.stream_id AS streamId, s.correlation_id AS correlationId,
         m.bytes AS bytes, m.copy_kind AS copyKind, m.src_kind AS srcKind, m.dst_kind AS dstKind,
         s.step AS step, s.layer AS layer, m.phase AS phase
  FROM gpu_memcpy m JOIN slice s ON s.id = m.slice;
CREATE VIEW CUPTI_ACTIVITY_KIND_MEMSET AS
  SELECT s.start_ns AS start, s.start_ns + s.dur_ns AS "end", m.device_id AS deviceId,
         0 AS contextId, m.stream_id AS streamId, s.correlation_id AS correlationId,
         m.value AS value, m.bytes AS bytes, m.memory_kind AS memKind,
         s.step AS step, s.layer AS layer, m.phase AS phase
  FROM gpu_memset m JOIN slice s ON s.id = m.slice;
CREATE VIEW CUPTI_ACTIVITY_KIND_SYNCHRONIZATION AS
  SELECT s.start_ns AS start, s.start_ns + s.dur_ns AS "end", 0 AS contextId,
         y.stream_id AS streamId, y.cuda_event_id AS eventId, s.correlation_id AS correlationId,
         y.sync_type AS syncType, t.thread_id AS globalTid, s.step AS step, y.phase AS phase
  FROM gpu_sync y JOIN slice s ON s.id = y.slice LEFT JOIN track t ON t.id = s.track;
CREATE VIEW CUPTI_ACTIVITY_KIND_RUNTIME AS
  SELECT s.start_ns AS start, s.start_ns + s.dur_ns AS "end", 0 AS eventClass,
         a.thread_id AS globalTid, s.correlation_id AS correlationId, s.name AS nameId,
         a.return_value AS returnValue, NULL AS callchainId, a.cbid AS cbid,
         s.step AS step, s.layer AS layer, a.phase AS phase
  FROM cuda_api a JOIN slice s ON s.id = a.slice WHERE a.api = 'runtime';
CREATE VIEW CUPTI_ACTIVITY_KIND_DRIVER AS
  SELECT s.start_ns AS start, s.start_ns + s.dur_ns AS "end", 0 AS eventClass,
         a.thread_id AS globalTid, s.correlation_id AS correlationId, s.name AS nameId,
         a.return_value AS returnValue, NULL AS callchainId, a.cbid AS cbid,
         s.step AS step, s.layer AS layer, a.phase AS phase
  FROM cuda_api a JOIN slice s ON s.id = a.slice WHERE a.api = 'driver';
CREATE VIEW NVTX_EVENTS AS
  SELECT s.start_ns AS start, s.start_ns + s.dur_ns AS "end", 59 AS eventType,
         NULL AS text, s.name AS textId, s.track AS globalTid, 0 AS domainId
  FROM slice s
  WHERE s.category IN (SELECT id FROM string WHERE text IN ('step', 'phase', 'nvtx'));
-- The caching allocator's events (memory_event) in the columns of Nsight Systems'
-- CUDA_GPU_MEMORY_USAGE_EVENTS (memoryOperationType 0 = allocation, 1 = free; name = StringIds id
-- of the category), plus the category's bytes in use after the event, so nsys-style SQL runs on
-- it with only the table name changed.
CREATE VIEW ALLOCATOR_MEMORY_USAGE_EVENTS AS
  SELECT m.ts_ns AS start, t.rank AS globalPid, t.thread_id AS deviceId, m.address AS address,
         m.bytes AS bytes, CASE m.kind WHEN 'free' THEN 1 ELSE 0 END AS memoryOperationType,
         m.category AS name, m.in_use_bytes AS inUseBytes, m.step AS step
  FROM memory_event m LEFT JOIN track t ON t.id = m.track;
)sql";

std::string hostName() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

const char* schemaSql() {
  return kSchemaSqlV1;
}

Status createSchema(Database& db) {
  MOEWB_RETURN_IF_ERROR(db.exec(kSchemaSqlV1));
  const std::string pragmas = "PRAGMA application_id = " + std::to_string(kApplicationId) +
                              "; PRAGMA user_version = " + std::to_string(kSchemaVersion) + ";";
  return db.exec(pragmas.c_str());
}

Status writeInitialMeta(Database& db) {
  MOEWB_ASSIGN_OR_RETURN(Statement insert,
                         Statement::prepare(db, "INSERT INTO meta(key, value) VALUES (?1, ?2)"));
  const std::pair<const char*, std::string> rows[] = {
      {kMetaSchemaVersion, std::to_string(kSchemaVersion)},
      {kMetaFormat, kFormatName},
      {kMetaToolVersion, MOEWB_TOOL_VERSION},
      {kMetaHost, hostName()},
      {kMetaCreatedUnixNs, std::to_string(unixNowNs())},
      {kMetaClockDomain, kClockDomain},
      {kMetaMaxSliceDurNs, "0"},
      {kMetaHeartbeatUnixMs, std::to_string(unixNowNs() / kNsPerMs)},
  };
  for (const auto& [key, value] : rows) {
    MOEWB_RETURN_IF_ERROR(insert.bindText(1, key));
    MOEWB_RETURN_IF_ERROR(insert.bindText(2, value));
    MOEWB_RETURN_IF_ERROR(insert.run());
  }
  return Status::ok();
}

}  // namespace moewb::storage::detail
