// The live-control protocol of a run (docs/CLI.md, "Live control of a headless run"): plain text
// lines over a Unix stream socket, one request per line, each answered by one line that starts
// with "ok" or "error: ". This header holds the pure part, with no socket: parsing a request
// line, checking that it is text, and formatting the answers. ControlServer (control_socket.h)
// and askControlSocket (control_client.h) speak it.
//
// Requests (words separated by spaces or tabs; a trailing '\r' is ignored):
//   status                      "ok state=running|paused|stopping step=N planned=M committed=C
//                               backend=cpu|cuda trace=PATH" (the trace path last: it may hold
//                               spaces)
//   pause | resume | step | stop     answered once the trainer took the command at a step boundary
//   set KEY=VALUE [KEY=VALUE ...]    one live patch; answered with the trainer's verdict
//   apply KEY=VALUE [KEY=VALUE ...]  the same patch recorded with source "tuner" (a study's pick,
//                               `moewb tune --apply`) instead of the server's ("cli")
//   keys                        "ok KEY KEY ..." (the keys a patch may change on this run)
// Everything here is O(length of the line) and thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moewb/base/status.h"

namespace moewb::run {

// The longest request line accepted, in bytes, without its '\n'. A longer one is answered with
// an error and its connection closed.
inline constexpr size_t kControlMaxLineBytes = 4096;

enum class ControlVerb : uint8_t { kStatus, kPause, kResume, kStep, kStop, kSet, kKeys, kApply };

struct ControlRequest {
  ControlVerb verb = ControlVerb::kStatus;
  std::vector<std::string> assignments;  // kSet, kApply: "section.key=value", in given order
  std::string source;  // the patch's TrainerCommand::source: "tuner" for kApply; "" = the server's
};

// Parses one request line (without its '\n'; one trailing '\r' is dropped). The verb is
// case-sensitive. For `set` and `apply`, each word that starts with a key ("section.key",
// letters, digits, '_' and '.') and '=' starts an assignment; other words continue the previous
// assignment's value after one space, so `set swap.ops=["moe_act", "attn"]` is one assignment.
// `apply` sets ControlRequest::source to "tuner". Errors (kInvalidArgument, plain words naming
// what was wrong and what is accepted): a line that is not UTF-8 text or holds control
// characters, an empty line, an unknown verb, arguments to a verb that takes none, `set` or
// `apply` without an assignment or with a word before the first one, a line over
// kControlMaxLineBytes.
Result<ControlRequest> parseControlRequest(std::string_view line);

// "ok" when `detail` is empty, else "ok " + detail; control characters become spaces. No '\n'.
std::string controlOk(std::string_view detail = {});

// "error: " + status.message() on one line: control characters become spaces, and the whole
// answer is cut to kControlMaxLineBytes bytes (on a UTF-8 character boundary). No '\n'.
std::string controlError(const Status& status);

// True when `answer` (one line, no '\n') reports success: it is "ok" or starts with "ok ".
bool isControlOk(std::string_view answer);

// The trace path in a `status` answer: everything after " trace=" (it comes last and may hold
// spaces). kInvalidArgument when `answer` is not an ok answer holding a non-empty trace path.
Result<std::string> controlStatusTrace(std::string_view answer);

// The keys of a `keys` answer ("ok KEY KEY ..."), in order; empty for a bare "ok".
// kInvalidArgument when `answer` is not an ok answer.
Result<std::vector<std::string>> controlKeyList(std::string_view answer);

// The accepted requests, for messages: "status, pause, resume, step, stop, set KEY=VALUE ...,
// apply KEY=VALUE ..., keys".
const char* controlRequestList();

}  // namespace moewb::run
