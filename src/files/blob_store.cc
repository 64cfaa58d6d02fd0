#include "files/blob_store.h"

#include <fmt/format.h>

#include "common/json_limits.h"
#include "files/fake_store.h"
#include "files/local_store.h"
#include "files/s3_store.h"

namespace ringmaster::files {

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
