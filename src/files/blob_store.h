// BlobStore: where users' files live (datasets, checkpoints, outputs, logs).
// One seam, three backends, one contract (blob_store_contract_test.cc):
//   local  a directory; each object a file written to a temp file, fsynced and
//          renamed over the target (the embedded default);
//   s3     the S3 API with SigV4 and multipart uploads (Ceph RGW in tests);
//   fake   in memory, with injectable faults, for unit tests of its users.
//
// Keys are '/'-separated relative paths (ValidateFilesKey). Objects are written as
// streams: Create() returns a BlobWriter; nothing is visible until Commit(),
// and Commit() replaces any previous object atomically (a reader sees the old
// object or the new one, never a torn one). A writer dropped or aborted
// before Commit() leaves no trace, and so does one whose bytes do not match
// the SHA-256 or size limit it was created with. Objects are read as streams
// too, optionally a byte range of them.
//
// Every object records its size, SHA-256 and modification time. Thread-safe:
// any number of readers and writers at once; one BlobWriter or BlobReader is
// used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/files_key.h"
#include "common/status.h"

namespace ringmaster::files {


struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  std::string sha256;  // lowercase hex; List() may leave it empty (Head has it)
  int64_t mtime_ms = 0;
};

struct PutOptions {
  // When set (lowercase hex), Commit() fails with InvalidArgument and stores
  // nothing unless the bytes written hash to it.
  std::string expected_sha256;
  // Writes past this many bytes fail with ResourceExhausted and the object is
  // not stored (quotas and request limits).
  std::optional<uint64_t> max_bytes;
};

// [offset, offset + length); length nullopt = to the end. An offset past the
// end is InvalidArgument ("range not satisfiable").
struct ByteRange {
  uint64_t offset = 0;
  std::optional<uint64_t> length;
};

class BlobWriter {
 public:
  virtual ~BlobWriter() = default;  // aborts when not committed
  virtual Status Write(std::string_view data) = 0;
  // Makes the object visible, replacing any previous one. After a failure
  // nothing was stored.
  virtual StatusOr<ObjectInfo> Commit() = 0;
  virtual void Abort() = 0;
  virtual uint64_t bytes_written() const = 0;
};

class BlobReader {
 public:
  virtual ~BlobReader() = default;
  // The object being read (its whole size, not the range's).
  virtual const ObjectInfo& info() const = 0;
  // Up to n bytes of the range into buf; 0 at its end.
  virtual StatusOr<size_t> Read(char* buf, size_t n) = 0;
};

struct ListResult {
  std::vector<ObjectInfo> objects;  // in byte order of their keys
  // Set when more objects match: pass it as `after` for the next page.
  std::optional<std::string> next_after;
};

class BlobStore {
 public:
  virtual ~BlobStore() = default;

  // "local", "s3" or "fake": names the backend in errors (Unavailable says
  // "storage backend s3 (http://...): ...").
  virtual std::string Describe() const = 0;
  // The longest key this store takes: kMaxFilesKeyBytes, less an S3 key prefix.
  virtual size_t max_key_bytes() const { return kMaxFilesKeyBytes; }

  virtual StatusOr<std::unique_ptr<BlobWriter>> Create(const std::string& key, const PutOptions& options) = 0;
  // NotFound when there is no such object.
  virtual StatusOr<std::unique_ptr<BlobReader>> Open(const std::string& key, const ByteRange& range) = 0;
  virtual StatusOr<ObjectInfo> Head(const std::string& key) = 0;
  // Objects whose key starts with `prefix` (any string, not only whole
  // segments) and sorts after `after`, at most `limit` (1..1000) of them.
  virtual StatusOr<ListResult> List(const std::string& prefix, const std::string& after, size_t limit) = 0;
  // NotFound when there is no such object.
  virtual Status Delete(const std::string& key) = 0;

  // Convenience wrappers over the streaming calls.
  StatusOr<ObjectInfo> Put(const std::string& key, std::string_view data, const PutOptions& options = {});
  StatusOr<std::string> ReadAll(const std::string& key, const ByteRange& range = {});
};

// Opens a store from a URL: "local:/var/lib/ringmaster/files" (or a plain
// absolute path), "s3://BUCKET?endpoint=http://host:port&region=R[&prefix=P]",
// or "fake:". S3 credentials come from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, or from the file named by `credentials=` (lines
// "access_key = ..." and "secret_key = ...", as s3cmd writes them).
StatusOr<std::unique_ptr<BlobStore>> OpenBlobStore(const std::string& url);

}  // namespace ringmaster::files
