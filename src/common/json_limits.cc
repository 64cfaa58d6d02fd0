#include "common/json_limits.h"

#include <algorithm>
#include <cstdint>
#include <new>

#include <fmt/format.h>

namespace ringmaster {
namespace {

// The length of the well-formed UTF-8 sequence at text[i], or 0 if there is
// none (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF).
size_t Utf8SequenceAt(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return 0;
  }
  if (text.size() - i < len) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return len;
}

}  // namespace

size_t InvalidUtf8At(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceAt(text, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

bool IsDisplayText(std::string_view text) {
  if (!IsValidUtf8(text)) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) return false;
    if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) <= 0x9f) return false;  // C1
    if (c == 0xe2 && text.substr(i + 1, 2) == "\x80\xa8") return false;  // U+2028
    if (c == 0xe2 && text.substr(i + 1, 2) == "\x80\xa9") return false;  // U+2029
  }
  return true;
}

namespace {

// The code point of the valid sequence of `n` bytes at text[i].
uint32_t CodePointAt(std::string_view text, size_t i, size_t n) {
  const auto byte = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(text[i + k])); };
  if (n == 1) return byte(0);
  uint32_t cp = byte(0) & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (byte(k) & 0x3F);
  return cp;
}

// Code points past ASCII that move a terminal's cursor or reorder the text around them.
bool IsHiddenControl(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E || cp == 0x200F || cp == 0x061C;
}

}  // namespace

std::string EscapeControl(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes));
  for (size_t i = 0; i < text.size();) {
    if (out.size() >= max_bytes) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t n = Utf8SequenceAt(text, i);
    if (n == 0 || c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    if (const uint32_t cp = CodePointAt(text, i, n); n > 1 && IsHiddenControl(cp)) {
      out += fmt::format("\\u{:04x}", cp);
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

int JsonDepth(std::string_view text, int stop_above) {
  // Counts every bracket outside strings, valid or not. A JSON parser only
  // nests on brackets outside strings, and it agrees with this scan on where
  // strings start and end up to the first error, where it stops: so this is
  // never less than the depth it reaches.
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > stop_above) return deepest;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default: break;
    }
  }
  return deepest;
}

StatusOr<nlohmann::json> ParseJson(std::string_view text, const JsonLimits& limits, std::string_view what) {
  if (text.size() > limits.max_bytes) {
    return InvalidArgument(fmt::format("{}: {} bytes of JSON, more than the limit of {}", what, text.size(),
                                       limits.max_bytes));
  }
  if (JsonDepth(text, limits.max_depth) > limits.max_depth) {
    return InvalidArgument(fmt::format("{}: JSON nested more than {} levels deep", what, limits.max_depth));
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    // "[json.exception.parse_error.101] parse error at ...; last read: '<the
    // input>'": the input may be long, binary or not UTF-8.
    std::string_view why = e.what();
    if (const size_t tag = why.find("] "); why.rfind("[json.exception.", 0) == 0 && tag != why.npos) {
      why.remove_prefix(tag + 2);
    }
    return InvalidArgument(fmt::format("{}: not valid JSON: {}", what, Printable(why, 200)));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(fmt::format("{}: out of memory parsing {} bytes of JSON", what, text.size()));
  }
}

}  // namespace ringmaster
