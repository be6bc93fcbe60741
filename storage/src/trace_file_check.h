// Checks on a trace file's bytes before SQLite opens it, so that a missing, empty, foreign or
// truncated file gets a clear Status naming the file instead of a generic SQLite error.
// Cost: one stat and a read of the first 100 bytes (the SQLite header).
#pragma once

#include <string>

#include "moewb/base/status.h"

namespace moewb::storage::detail {

// Ok when `path` is a regular file that starts with a plausible SQLite header and, when no
// non-empty -wal file sits beside it, is as long as its header says. An empty file beside a
// non-empty -wal is refused: SQLite takes an empty database for a new one and deletes its -wal on
// open (even read-only), destroying what is left of the trace; our writer never makes that state
// (the switch to WAL writes the 4 KiB header into the main file first), so it means damage.
// Errors: kNotFound (missing), kFailedPrecondition (a directory), kDataLoss (empty, empty beside
// a -wal with data, not SQLite, truncated); each names `path`.
Status checkTraceFileHeader(const std::string& path);

}  // namespace moewb::storage::detail
