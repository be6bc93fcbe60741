// The trace store's schema v1 (the one place it is declared) and the names of its meta keys.
//
// Operations: createSchema() runs the DDL on an empty database; writeInitialMeta() fills the meta
// table. Both run inside the caller's transaction and cost O(1). The version number itself is
// kSchemaVersion in moewb/storage/trace_reader.h, shared with the reader.
#pragma once

#include <cstdint>

#include "moewb/base/status.h"
#include "sqlite_util.h"

namespace moewb::storage::detail {

// meta(key, value) keys.
inline constexpr const char* kMetaSchemaVersion = "schema_version";
inline constexpr const char* kMetaFormat = "format";
inline constexpr const char* kMetaToolVersion = "tool_version";
inline constexpr const char* kMetaHost = "host";
inline constexpr const char* kMetaCreatedUnixNs = "created_unix_ns";
inline constexpr const char* kMetaClockDomain = "clock_domain";
// Longest slice duration committed so far; bounds the index scan of window queries.
inline constexpr const char* kMetaMaxSliceDurNs = "max_slice_dur_ns";
// Longest swap copy (swap_event end_ns - start_ns) committed so far; bounds the index scan of
// TraceReader::swapEvents. Written once the file holds a swap event.
inline constexpr const char* kMetaMaxSwapDurNs = "max_swap_dur_ns";

inline constexpr const char* kFormatName = "moewb-trace";
inline constexpr const char* kClockDomain = "CLOCK_MONOTONIC";
// PRAGMA application_id of trace files ("MOEW").
inline constexpr int32_t kApplicationId = 0x4D4F4557;

// The DDL of schema v1: tables, indexes and the Nsight-Systems-named views.
const char* schemaSql();

// Creates every table, index and view on `db`.
Status createSchema(Database& db);

// Inserts the meta rows (schema version, format, tool version, host, creation time, clock
// domain, max slice duration 0).
Status writeInitialMeta(Database& db);

}  // namespace moewb::storage::detail
