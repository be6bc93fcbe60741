// Text helpers for messages shown to people, and for reading back the TOML the engine writes.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace moewb {

// Returns `message` with every run of non-whitespace longer than `maxRunChars` cut to its first
// `maxRunChars` / 2 characters, "...", its last 16 characters and "(N characters)", so an error
// that quotes a user's value (a 1 MB string in a config) stays readable. Cuts happen on UTF-8
// character boundaries; shorter runs and whitespace are left as they are.
std::string shortenLongRuns(const std::string& message, size_t maxRunChars = 200);

// True when `text` is well-formed UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing
// above U+10FFFF, no sequence cut short.
bool isValidUtf8(std::string_view text);

// `parts` joined with `separator` between them ("" for none): {"a", "b"}, ", " -> "a, b".
std::string joinText(const std::vector<std::string>& parts, const std::string& separator);

// "section.key" -> value text for every `key = value` line under a `[section]` header of `toml`
// (the flat layout engine::toToml writes; comments and blank lines skipped). Values are trimmed
// and kept as TOML text ("0.5", "\"cce\"", "true"); a key seen twice keeps its last value.
std::map<std::string, std::string> tomlKeyValues(const std::string& toml);

}  // namespace moewb
