// The fuzz targets of issue 19: each takes arbitrary bytes and feeds them to a reader of untrusted
// input the way the CLI and the GUI do. A target returns normally for every input (a bad input is a
// Status error, which the target drops); a crash, an uncaught exception, a sanitizer report or a
// hang is a bug in the code under test.
//
// Two drivers call them: the libFuzzer executables (tests/fuzz/libfuzzer_entry.cpp, built with
// clang and -DMOEWB_FUZZ=ON) and the ordinary CTest test fuzz_regressions_test, which replays every
// file of tests/fuzz/corpus/<target>/ and tests/fuzz/regressions/<target>/ with any compiler.
// Thread-safety: none; one call at a time per process (the targets share temp files and a model).
#pragma once

#include <cstddef>
#include <cstdint>

namespace moewb::fuzz {

// TOML text -> parseConfigToml -> validateConfig, and for a config that parses, the printed form
// (toToml) must parse back to the same config (the round trip config.h promises); a mismatch
// aborts.
int fuzzConfig(const uint8_t* data, size_t size);

// The bytes as a trace file: written to a temp file, opened with TraceReader::open as `moewb
// info` does, then every query of info, export (exportChromeTrace), merge (mergeTraces) and the
// GUI (time windows, GPU lanes, memory series, parallel views, collectives, details).
int fuzzTraceReader(const uint8_t* data, size_t size);

// The bytes as a safetensors file: readSafetensors, then loaded as a checkpoint, as weights and as
// an alignment dump into a small model (tiny.toml shrunk; see tests/fuzz/make_seeds.sh).
int fuzzSafetensors(const uint8_t* data, size_t size);

}  // namespace moewb::fuzz
