#include "common/files_key.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/json_limits.h"

namespace ringmaster {

Status ValidateFilesKey(std::string_view key) {
  if (key.empty()) return InvalidArgument("path: empty");
  if (key.size() > kMaxFilesKeyBytes) {
    return InvalidArgument(fmt::format("path: {} bytes, over the limit of {}", key.size(), kMaxFilesKeyBytes));
  }
  if (!IsValidUtf8(key)) return InvalidArgument("path: not valid UTF-8");
  for (unsigned char c : key) {
    if (c < 0x20 || c == 0x7f) return InvalidArgument("path: contains a control character (or NUL)");
    if (c == '\\') return InvalidArgument("path: contains a backslash; separate directories with '/'");
  }
  if (key.front() == '/') return InvalidArgument("path: must be relative (no leading '/')");
  size_t start = 0, segments = 0;
  while (true) {
    if (++segments > kMaxFilesKeyDepth) {
      return InvalidArgument(fmt::format("path: \"{}...\" is over {} levels deep", key.substr(0, std::min<size_t>(start, 120)),
                                         kMaxFilesKeyDepth));
    }
    size_t slash = key.find('/', start);
    std::string_view seg = key.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (seg.empty()) return InvalidArgument("path: has an empty segment ('//' or a trailing '/')");
    if (seg == "." || seg == "..") return InvalidArgument("path: '.' and '..' are not allowed");
    if (seg.size() > 250) return InvalidArgument("path: a segment is over 250 bytes");
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return Status::Ok();
}

}  // namespace ringmaster
