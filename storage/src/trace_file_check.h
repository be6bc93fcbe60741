// Checks on a trace file's bytes before SQLite opens it, so that a missing, empty, foreign or
// truncated file gets a clear Status naming the file instead of a generic SQLite error.
// Cost: one stat and a read of the first 100 bytes (the SQLite header).
#pragma once

#include <string>

#include "moewb/base/status.h"

namespace moewb::storage::detail {

// Ok when `path` is a regular file that starts with a plausible SQLite header and, when no
// non-empty -wal file sits beside it, is as long as its header says; also ok when it is empty
// but a non-empty -wal sits beside it (a live writer that has not checkpointed yet). Errors:
// kNotFound (missing), kFailedPrecondition (a directory), kDataLoss (empty, not SQLite, truncated);
// each names `path`.
Status checkTraceFileHeader(const std::string& path);

}  // namespace moewb::storage::detail
