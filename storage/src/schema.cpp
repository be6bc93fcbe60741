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
  track INTEGER NOT NULL,
  ts_ns INTEGER NOT NULL,
  kind TEXT NOT NULL,            -- alloc, free
  bytes INTEGER NOT NULL,
  address INTEGER NOT NULL,
  category INTEGER NOT NULL      -- string.id: weights, grads, optimizer, activations, ...
);
CREATE INDEX memory_event_ts_idx ON memory_event(ts_ns);
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
CREATE TABLE swap_event (
  id INTEGER PRIMARY KEY,
  tensor TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  direction TEXT NOT NULL,       -- to_host, to_device
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  stream INTEGER NOT NULL,
  late INTEGER NOT NULL          -- 1 when compute stalled waiting for it
);
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
CREATE VIEW StringIds AS SELECT id, text AS value FROM string;
CREATE VIEW NVTX_EVENTS AS
  SELECT s.start_ns AS start, s.start_ns + s.dur_ns AS "end", 59 AS eventType,
         NULL AS text, s.name AS textId, s.track AS globalTid, 0 AS domainId
  FROM slice s
  WHERE s.category IN (SELECT id FROM string WHERE text IN ('step', 'phase', 'nvtx'));
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
  };
  for (const auto& [key, value] : rows) {
    MOEWB_RETURN_IF_ERROR(insert.bindText(1, key));
    MOEWB_RETURN_IF_ERROR(insert.bindText(2, value));
    MOEWB_RETURN_IF_ERROR(insert.run());
  }
  return Status::ok();
}

}  // namespace moewb::storage::detail
