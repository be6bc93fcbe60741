// BulkTraceReader: whole-table reads of a trace for loading it into memory (the GUI's loader),
// without the per-row costs of TraceReader's row queries.
//
// Slices come with their name and category as string-table ids (SliceIdRow), not text: the
// string table (a few dozen to a few thousand rows) is resolved once with stringText() instead of
// two joins per slice, and a row holds no heap memory. Rows are handed over in batches of a
// caller-chosen size through one reused vector, from statements prepared once per reader.
// Operations and costs: forEachSliceBatch is one index range scan of slice(start_ns) in start
// order, O(slices); forEachExpertLoadBatch is one index range scan of expert_load(step, layer)
// with no sort (rows in (step, layer) order, then as the file holds them, not sorted by expert
// or rank), O(rows); forEachExpertLoadInFileOrder is one scan of the table itself in rowid
// order (no index, no per-row lookup of the row from the index: about a third less CPU than the
// index walk, for a whole-table read), O(rows); stringText is one primary-key probe per id not
// seen before; maxSliceId one probe.
// The reader opens its own hardened read-only connection (trace_open.h), so it can run on
// another thread than a TraceReader of the same file; it does not check that the file is a MoE
// Workbench trace (open a TraceReader first for that). One thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/storage/rows.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::storage {

// A slice row with its name and category as ids of the string table (40 + 16 bytes, no heap).
struct SliceIdRow {
  int64_t id = 0;             // slice id
  int64_t track = 0;          // track id
  int64_t startNs = 0;        // ns
  int64_t durNs = 0;          // ns
  int64_t nameId = 0;         // string id of the name
  int64_t categoryId = 0;     // string id of the category
  int64_t step = -1;          // -1 when not inside a step
  int64_t correlationId = 0;  // 0 = none
  int32_t layer = -1;         // -1 when not about one layer
  int32_t depth = 0;          // nesting level on its track
};

class BulkTraceReader {
 public:
  // Opens `path` read-only and hardened (as TraceReader::open, with options.queryTimeLimit per
  // query step). Errors: not found, not an SQLite file, corrupt, schema objects a trace never
  // holds; each message names the file.
  static Result<std::unique_ptr<BulkTraceReader>> open(const std::string& path,
                                                       const ReaderOptions& options = {});
  ~BulkTraceReader();

  // The text of string `id`, "" when the string table has no such id (as the row queries read a
  // dangling id). Cached: later calls for the same id cost nothing. Errors: read errors.
  Result<std::string> stringText(int64_t id);

  // Every slice in (start, id) order, handed to `visit` in batches of at most `rowsPerBatch`
  // rows (the vector is reused: move out what you keep). `visit` returns false to stop.
  // Errors: read errors (the batches handed over before stay valid).
  Status forEachSliceBatch(size_t rowsPerBatch,
                           const std::function<bool(std::vector<SliceIdRow>&)>& visit);

  // The highest slice id of the file, 0 when it has no slices (one index probe). With the file's
  // size and time it tells whether a file changed since a summary of it was made.
  Result<int64_t> maxSliceId();

  // The expert-load rows of steps fromStep..toStep (inclusive) in the order the file holds them
  // (rowid order; a writer appends them step by step, but nothing here relies on it), in batches
  // of at most `rowsPerBatch`. One scan of the whole table. `visit` returns false to stop.
  // Errors: read errors.
  Status forEachExpertLoadInFileOrder(
      int64_t fromStep, int64_t toStep, size_t rowsPerBatch,
      const std::function<bool(std::vector<ExpertLoadRow>&)>& visit);

  // The expert-load rows of steps fromStep..toStep (inclusive) in batches of at most
  // `rowsPerBatch`, in (step, layer) order and within a layer as the file holds them (no sort
  // by expert or rank). `visit` returns false to stop. Errors: read errors.
  Status forEachExpertLoadBatch(int64_t fromStep, int64_t toStep, size_t rowsPerBatch,
                                const std::function<bool(std::vector<ExpertLoadRow>&)>& visit);

 private:
  struct State;
  explicit BulkTraceReader(std::unique_ptr<State> state);
  std::unique_ptr<State> m_state;
};

}  // namespace moewb::storage
