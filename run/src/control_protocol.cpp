// The live-control protocol's text side (control_protocol.h): request parsing and answer lines.
#include "moewb/run/control_protocol.h"

#include <cstdint>

#include "moewb/base/text.h"

namespace moewb::run {
namespace {

bool isSpace(char c) { return c == ' ' || c == '\t'; }

// A control character other than the tab that separates words (C0 controls and DEL).
bool isControl(unsigned char c) { return (c < 0x20 && c != '\t') || c == 0x7f; }

std::vector<std::string_view> splitWords(std::string_view line) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && isSpace(line[i])) ++i;
    const size_t start = i;
    while (i < line.size() && !isSpace(line[i])) ++i;
    if (i > start) words.push_back(line.substr(start, i - start));
  }
  return words;
}

// "optim.lr=..." -> true: a key (letters, digits, '_', '.'; not empty) followed by '='.
bool startsAssignment(std::string_view word) {
  const size_t eq = word.find('=');
  if (eq == 0 || eq == std::string_view::npos) return false;
  for (size_t i = 0; i < eq; ++i) {
    const char c = word[i];
    const bool keyChar = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '_' || c == '.';
    if (!keyChar) return false;
  }
  return true;
}

// The word quoted for a message, cut when long.
std::string quoted(std::string_view word) {
  return "'" + shortenLongRuns(std::string(word), 64) + "'";
}

// The assignments of a `set` or `apply` request (`words[0]` names the verb, for messages).
Result<std::vector<std::string>> parseAssignments(const std::vector<std::string_view>& words) {
  const std::string verb(words[0]);
  std::vector<std::string> assignments;
  for (size_t i = 1; i < words.size(); ++i) {
    if (startsAssignment(words[i])) {
      assignments.emplace_back(words[i]);
    } else if (!assignments.empty()) {
      assignments.back() += " " + std::string(words[i]);
    } else {
      return invalidArgument(verb + ": " + quoted(words[i]) + " is not an assignment; accepted: " +
                             verb + " KEY=VALUE [KEY=VALUE ...], e.g. " + verb + " optim.lr=1e-3");
    }
  }
  if (assignments.empty()) {
    return invalidArgument(verb + " needs at least one KEY=VALUE, e.g. " + verb +
                           " optim.lr=1e-3 (the request keys lists the keys a run can change)");
  }
  return assignments;
}

// Replaces control characters by spaces.
std::string oneLine(std::string_view text) {
  std::string line(text);
  for (char& c : line) {
    if (isControl(static_cast<unsigned char>(c)) || c == '\t') c = ' ';
  }
  return line;
}

}  // namespace

Result<ControlRequest> parseControlRequest(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.size() > kControlMaxLineBytes) {
    return invalidArgument("request line of " + std::to_string(line.size()) +
                           " bytes; accepted: at most " + std::to_string(kControlMaxLineBytes));
  }
  if (!isValidUtf8(line)) return invalidArgument("the request is not UTF-8 text");
  for (char c : line) {
    if (isControl(static_cast<unsigned char>(c))) {
      return invalidArgument("the request holds control characters; accepted: one line of text");
    }
  }
  const std::vector<std::string_view> words = splitWords(line);
  if (words.empty()) {
    return invalidArgument(std::string("empty request; accepted: ") + controlRequestList());
  }
  static const std::pair<std::string_view, ControlVerb> kVerbs[] = {
      {"status", ControlVerb::kStatus}, {"pause", ControlVerb::kPause},
      {"resume", ControlVerb::kResume}, {"step", ControlVerb::kStep},
      {"stop", ControlVerb::kStop},     {"set", ControlVerb::kSet},
      {"keys", ControlVerb::kKeys},     {"apply", ControlVerb::kApply},
  };
  for (const auto& [name, verb] : kVerbs) {
    if (words[0] != name) continue;
    ControlRequest request;
    request.verb = verb;
    if (verb == ControlVerb::kSet || verb == ControlVerb::kApply) {
      MOEWB_ASSIGN_OR_RETURN(request.assignments, parseAssignments(words));
      if (verb == ControlVerb::kApply) request.source = "tuner";
    } else if (words.size() > 1) {
      return invalidArgument(std::string(name) + " takes no arguments (got " +
                             quoted(words[1]) + ")");
    }
    return request;
  }
  return invalidArgument("unknown command " + quoted(words[0]) + "; accepted: " +
                         controlRequestList());
}

std::string controlOk(std::string_view detail) {
  return detail.empty() ? "ok" : "ok " + oneLine(detail);
}

std::string controlError(const Status& status) {
  std::string answer = "error: " + oneLine(status.message());
  if (answer.size() > kControlMaxLineBytes) {
    size_t cut = kControlMaxLineBytes;
    while (cut > 0 && (static_cast<unsigned char>(answer[cut]) & 0xc0) == 0x80) --cut;
    answer.resize(cut);
  }
  return answer;
}

bool isControlOk(std::string_view answer) {
  return answer == "ok" || answer.substr(0, 3) == "ok ";
}

Result<std::string> controlStatusTrace(std::string_view answer) {
  const std::string_view marker = " trace=";
  const size_t at = answer.find(marker);
  if (!isControlOk(answer) || at == std::string_view::npos || at + marker.size() == answer.size()) {
    return invalidArgument("the run's status answer names no trace: " + quoted(answer));
  }
  return std::string(answer.substr(at + marker.size()));
}

Result<std::vector<std::string>> controlKeyList(std::string_view answer) {
  if (!isControlOk(answer)) {
    return invalidArgument("the run's keys answer is not ok: " + quoted(answer));
  }
  std::vector<std::string> keys;
  const std::vector<std::string_view> words = splitWords(answer);
  for (size_t i = 1; i < words.size(); ++i) keys.emplace_back(words[i]);
  return keys;
}

const char* controlRequestList() {
  return "status, pause, resume, step, stop, set KEY=VALUE [KEY=VALUE ...], apply KEY=VALUE "
         "[KEY=VALUE ...], keys";
}

}  // namespace moewb::run
