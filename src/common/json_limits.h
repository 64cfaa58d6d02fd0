// Bounded JSON parsing for untrusted text: request bodies, task metrics lines,
// stored records. nlohmann::json copies, compares and serialises
// recursively, so a document nested 200k levels deep overflows the stack
// long after it parsed. ParseJson refuses such text up front with a linear,
// non-recursive scan, and never throws. Also the UTF-8 checks that keep
// untrusted strings dumpable (nlohmann's dump() throws on invalid UTF-8) and
// printable in one-line error messages. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace ringmaster {

struct JsonLimits {
  size_t max_bytes = 16 << 20;
  int max_depth = 64;  // arrays and objects nested inside each other; `[]` is 1
};

// Parses `text`, refusing with InvalidArgument ("<what>: ...") text larger
// than max_bytes, nested deeper than max_depth, not valid JSON, or with
// invalid UTF-8 in a string. The message is valid UTF-8 and one line, so it
// can itself go into a JSON reply. Never throws.
StatusOr<nlohmann::json> ParseJson(std::string_view text, const JsonLimits& limits = {},
                                   std::string_view what = "body");

// The deepest nesting of arrays/objects in `text` outside JSON strings,
// scanning no further than needed to exceed `stop_above`. Any bytes: for
// text that is not JSON it is an upper bound of what a JSON parser would
// build before it fails. For pre-checks.
int JsonDepth(std::string_view text, int stop_above);

// The offset of the first byte that is not part of well-formed UTF-8 (an
// overlong form, a surrogate, a code point past U+10FFFF, a truncated
// sequence), or npos when `text` is all valid: what nlohmann's dump() accepts.
size_t InvalidUtf8At(std::string_view text);
inline bool IsValidUtf8(std::string_view text) { return InvalidUtf8At(text) == std::string_view::npos; }

// Valid UTF-8 that shows as it is on a terminal: no control characters (C0,
// DEL, C1) and no line or paragraph separator, so a name or reason from
// outside can neither break a table's line nor send a terminal escapes.
bool IsDisplayText(std::string_view text);

// `text` safe to write to a terminal or a log line, whoever sent it: bytes
// that are not valid UTF-8 and C0 controls and DEL as \xNN (ESC is \x1b, a
// newline \x0a), C1 controls, line/paragraph separators and bidi overrides as
// \uNNNN; other valid UTF-8 kept. Cut after max_bytes with "...". Always
// valid UTF-8, one line.
std::string EscapeControl(std::string_view text, size_t max_bytes = std::string_view::npos);
// EscapeControl cut short enough to quote in a one-line error message.
inline std::string Printable(std::string_view text, size_t max_bytes = 64) { return EscapeControl(text, max_bytes); }

}  // namespace ringmaster
