#include "files/blob_store.h"

#include <fmt/format.h>

#include "common/json_limits.h"
#include "files/fake_store.h"
#include "files/local_store.h"
#include "files/s3_store.h"

namespace ringmaster::files {

Status ValidateKey(std::string_view key) {
  if (key.empty()) return InvalidArgument("path: empty");
  if (key.size() > kMaxKeyBytes) return InvalidArgument(fmt::format("path: {} bytes, over the limit of {}", key.size(), kMaxKeyBytes));
  if (!IsValidUtf8(key)) return InvalidArgument("path: not valid UTF-8");
  for (unsigned char c : key) {
    if (c < 0x20 || c == 0x7f) return InvalidArgument("path: contains a control character (or NUL)");
    if (c == '\\') return InvalidArgument("path: contains a backslash; separate directories with '/'");
  }
  if (key.front() == '/') return InvalidArgument("path: must be relative (no leading '/')");
  size_t start = 0;
  while (true) {
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

StatusOr<ObjectInfo> BlobStore::Put(const std::string& key, std::string_view data, const PutOptions& options) {
  RM_ASSIGN_OR_RETURN(auto writer, Create(key, options));
  RM_RETURN_IF_ERROR(writer->Write(data));
  return writer->Commit();
}

StatusOr<std::string> BlobStore::ReadAll(const std::string& key, const ByteRange& range) {
  RM_ASSIGN_OR_RETURN(auto reader, Open(key, range));
  std::string out;
  char buf[64 * 1024];
  while (true) {
    RM_ASSIGN_OR_RETURN(size_t n, reader->Read(buf, sizeof buf));
    if (n == 0) return out;
    out.append(buf, n);
  }
}

StatusOr<std::unique_ptr<BlobStore>> OpenBlobStore(const std::string& url) {
  if (url == "fake:" || url == "fake") return std::unique_ptr<BlobStore>(NewFakeBlobStore());
  if (url.rfind("s3://", 0) == 0) {
    RM_ASSIGN_OR_RETURN(S3Config config, ParseS3Url(url));
    return NewS3BlobStore(config);
  }
  std::string path = url.rfind("local:", 0) == 0 ? url.substr(6) : url;
  if (path.empty() || path.front() != '/') {
    return InvalidArgument("files: expected local:/ABSOLUTE/DIR, an absolute directory, s3://BUCKET?endpoint=URL or fake:; got \"" +
                           Printable(url) + "\"");
  }
  return NewLocalBlobStore(path);
}

}  // namespace ringmaster::files
