#include "common/strings.h"

namespace ringmaster {

std::vector<std::string> Split(std::string_view text, char sep, SplitOptions options) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  for (size_t start = 0;;) {
    size_t end = text.find(sep, start);
    std::string_view piece = text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (options.trim) {
      size_t first = piece.find_first_not_of(" \t");
      piece = first == std::string_view::npos ? std::string_view() : piece.substr(first, piece.find_last_not_of(" \t") - first + 1);
    }
    if (!piece.empty() || !options.skip_empty) out.emplace_back(piece);
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return out;
}

std::string PercentEncode(std::string_view in, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(in.size());
  for (unsigned char c : in) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace ringmaster
