// Finding the program a command starts (`moewb capture`, `moewb launch`), as execvp would.
#pragma once

#include <string>

#include "moewb/base/status.h"

namespace moewb::cli {

// PROGRAM as execvp would find it: the path itself when it has a '/', else the first executable
// match on $PATH (default /usr/local/bin:/usr/bin:/bin). Errors: kNotFound naming the program and
// where it was looked for ("not found or not executable" / "not found on PATH").
Result<std::string> resolveProgram(const std::string& program);

}  // namespace moewb::cli
