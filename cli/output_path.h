// Output paths of the commands that write files (run, capture, merge, export): what they may
// replace and the names they derive from run.name, checked before anything is created.
#pragma once

#include <string>
#include <vector>

#include "moewb/base/status.h"

namespace moewb::cli {

enum class OutputKind {
  kTrace,  // a moewb trace (SQLite): --force replaces only an empty file or another moewb trace
  kJson,   // an export: --force replaces a regular file
};

// ok when `path` (the value of `option`, e.g. "--out") may be written: it does not exist yet, or
// `force` is set and it is a regular file of `kind` (see OutputKind). Refused (kInvalidArgument,
// the message names the option, the path and what is accepted): an existing path without
// --force; with --force a directory, device, FIFO or socket, or a file that is not of `kind`
// (which --force must not destroy); a path that is one of `inputs` (the same file, through
// links too); a path the filesystem cannot resolve (too long a name, a symlink loop, a missing
// or unreadable directory). Never throws.
Status checkOutputPath(const std::string& path, const std::string& option, bool force,
                       OutputKind kind, const std::vector<std::string>& inputs = {});

// ok when `name` (run.name) can name the default outputs runs/<name>.sqlite, runs/<name>-dumps
// and runs/<name>-checkpoints: 1 to 100 of the letters, digits, '.', '-' and '_', not starting
// with '.'. Otherwise kInvalidArgument saying so and suggesting --out.
Status checkRunNameForPaths(const std::string& name);

}  // namespace moewb::cli
