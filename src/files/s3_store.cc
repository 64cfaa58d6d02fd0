#include "files/s3_store.h"

#include <chrono>
#include <future>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/json_limits.h"
#include "common/strings.h"
#include "files/s3_protocol.h"
#include "http/client.h"

namespace ringmaster::files {
namespace {

constexpr std::string_view kEmptySha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

using Response = http::ClientResponse;

// The client's timeouts are the backend's unavailability to the store's callers.
Status Unreachable(const Status& s) {
  if (s.code() == StatusCode::kDeadlineExceeded) return Unavailable(s.message());
  return s;
}

class S3Store;

// ---- the writer: one PUT for small objects, a multipart upload for big ones

class S3Writer : public BlobWriter {
 public:
  S3Writer(S3Store* store, std::string key, PutOptions options) : store_(store), key_(std::move(key)), options_(options) {}
  ~S3Writer() override { Abort(); }
  Status Write(std::string_view data) override;
  StatusOr<ObjectInfo> Commit() override;
  void Abort() override;
  uint64_t bytes_written() const override { return written_; }

 private:
  // Starts uploading the full buffer as the next part in the background,
  // once the part before it is done: the client's next 8 MiB arrive while
  // this one goes to S3 (two parts of memory per upload at most).
  Status StartPart();
  Status StartUpload();
  Status WaitPart();

  S3Store* store_;
  std::string key_;
  PutOptions options_;
  std::string buffer_;
  Sha256 hash_;
  uint64_t written_ = 0;
  std::string upload_id_;
  std::vector<std::pair<int, std::string>> parts_;  // (number, etag); an etag filled in by inflight_
  std::future<Status> inflight_;                    // the part being uploaded, if any
  bool done_ = false;
};

class S3Reader : public BlobReader {
 public:
  S3Reader(std::unique_ptr<http::ResponseStream> stream, ObjectInfo info, uint64_t remaining, std::string where)
      : stream_(std::move(stream)), info_(std::move(info)), remaining_(remaining), where_(std::move(where)) {}
  const ObjectInfo& info() const override { return info_; }
  StatusOr<size_t> Read(char* buf, size_t n) override;

 private:
  std::unique_ptr<http::ResponseStream> stream_;  // null for an empty range
  ObjectInfo info_;
  uint64_t remaining_;
  std::string where_;  // the store, for errors
};

class S3Store : public BlobStore {
 public:
  S3Store(S3Config config, Endpoint endpoint)
      : config_(std::move(config)), endpoint_(std::move(endpoint)), client_(Target(), Options()) {}

  std::string Describe() const override { return "s3 (" + config_.endpoint + ", bucket " + config_.bucket + ")"; }
  std::string Where() const { return "storage backend s3 (" + config_.endpoint + ")"; }
  size_t max_key_bytes() const override { return kMaxFilesKeyBytes - config_.prefix.size(); }

  // ValidateFilesKey, counting the store's prefix against S3's 1024 bytes.
  Status Check(const std::string& key) const {
    RM_RETURN_IF_ERROR(ValidateFilesKey(key));
    if (key.size() > max_key_bytes()) {
      return InvalidArgument(fmt::format("path: {} bytes, over the limit of {}", key.size(), max_key_bytes()));
    }
    return Status::Ok();
  }

  Status EnsureBucket() {
    RM_ASSIGN_OR_RETURN(Response r, Do("HEAD", "", {}, {}, ""));
    if (r.status == 200) return Status::Ok();
    if (r.status != 404) return ErrorFor(r, "bucket " + config_.bucket);
    RM_ASSIGN_OR_RETURN(r, Do("PUT", "", {}, {}, ""));
    if (r.status == 200 || r.status == 409) return Status::Ok();
    return ErrorFor(r, "create bucket " + config_.bucket);
  }

  StatusOr<std::unique_ptr<BlobWriter>> Create(const std::string& key, const PutOptions& options) override {
    RM_RETURN_IF_ERROR(Check(key));
    return std::unique_ptr<BlobWriter>(new S3Writer(this, key, options));
  }

  StatusOr<std::unique_ptr<BlobReader>> Open(const std::string& key, const ByteRange& range) override {
    RM_RETURN_IF_ERROR(Check(key));
    if (range.length && *range.length == 0) {  // HTTP cannot ask for zero bytes
      RM_ASSIGN_OR_RETURN(ObjectInfo info, Head(key));
      if (range.offset > info.size || (range.offset == info.size && info.size > 0)) {
        return InvalidArgument(fmt::format("range not satisfiable: offset {} of a {}-byte file", range.offset, info.size));
      }
      return std::unique_ptr<BlobReader>(new S3Reader(nullptr, info, 0, Where()));
    }
    std::map<std::string, std::string> extra;
    if (range.offset > 0 || range.length) {
      extra["range"] = range.length ? fmt::format("bytes={}-{}", range.offset, range.offset + *range.length - 1)
                                    : fmt::format("bytes={}-", range.offset);
    }
    auto stream = client_.Open(Build("GET", ObjectPath(key), {}, extra, ""), {.what = "GET " + key});
    if (!stream.ok()) return Unreachable(stream.status());
    Response r = (*stream)->head();
    if (r.status != 200 && r.status != 206) {
      // Read a small error body so the message can name S3's error code.
      auto body = (*stream)->ReadAll(64 * 1024);
      if (body.ok()) r.body = std::move(*body);
      if (r.status == 416) {
        return InvalidArgument(fmt::format("range not satisfiable: offset {} of {}", range.offset, key));
      }
      return ErrorFor(r, key);
    }
    ObjectInfo info = InfoFrom(key, r);
    uint64_t length = r.content_length.value_or(0);
    if (r.status == 206) {
      // Content-Range: bytes 10-19/1000
      std::string cr = r.Header("content-range");
      size_t slash = cr.rfind('/');
      if (slash != std::string::npos) info.size = std::strtoull(cr.c_str() + slash + 1, nullptr, 10);
    } else {
      info.size = length;
    }
    return std::unique_ptr<BlobReader>(new S3Reader(std::move(*stream), info, length, Where()));
  }

  StatusOr<ObjectInfo> Head(const std::string& key) override {
    RM_RETURN_IF_ERROR(Check(key));
    RM_ASSIGN_OR_RETURN(Response r, Do("HEAD", ObjectPath(key), {}, {}, ""));
    if (r.status != 200) return ErrorFor(r, key);
    ObjectInfo info = InfoFrom(key, r);
    info.size = std::strtoull(r.Header("content-length").c_str(), nullptr, 10);
    return info;
  }

  StatusOr<ListResult> List(const std::string& prefix, const std::string& after, size_t limit) override {
    if (limit == 0 || limit > 1000) return InvalidArgument("limit: must be 1..1000");
    std::map<std::string, std::string> query = {
        {"list-type", "2"}, {"prefix", config_.prefix + prefix}, {"max-keys", std::to_string(limit)}};
    if (!after.empty()) query["start-after"] = config_.prefix + after;
    RM_ASSIGN_OR_RETURN(Response r, Do("GET", "", query, {}, ""));
    if (r.status != 200) return ErrorFor(r, "list " + prefix);
    ListResult out;
    for (const std::string& contents : XmlAll(r.body, "Contents")) {
      ObjectInfo info;
      std::string raw_key = XmlFirst(contents, "Key");
      if (raw_key.compare(0, config_.prefix.size(), config_.prefix) != 0) continue;
      info.key = raw_key.substr(config_.prefix.size());
      info.size = std::strtoull(XmlFirst(contents, "Size").c_str(), nullptr, 10);
      info.mtime_ms = ParseTimeMs(XmlFirst(contents, "LastModified"));
      out.objects.push_back(std::move(info));
    }
    if (XmlFirst(r.body, "IsTruncated") == "true" && !out.objects.empty()) out.next_after = out.objects.back().key;
    return out;
  }

  Status Delete(const std::string& key) override {
    RM_RETURN_IF_ERROR(Head(key).status());  // S3 deletes answer 204 for missing keys too
    RM_ASSIGN_OR_RETURN(Response r, Do("DELETE", ObjectPath(key), {}, {}, ""));
    if (r.status != 204 && r.status != 200) return ErrorFor(r, key);
    return Status::Ok();
  }

  // ---- plumbing used by the writer and reader

  std::string ObjectPath(const std::string& key) const { return config_.prefix + key; }

  // One request with a body held in memory; the response body read whole
  // (S3's XML answers are small). The client sends it once more on a fresh
  // connection when a kept-alive one turns out to have been closed.
  StatusOr<Response> Do(const std::string& method, const std::string& key,
                        const std::map<std::string, std::string>& query,
                        const std::map<std::string, std::string>& extra, std::string_view body) {
    auto r = client_.Do(Build(method, key, query, extra, body), {.what = method + " " + (key.empty() ? "/" : key)});
    if (!r.ok()) return Unreachable(r.status());
    return r;
  }

  http::ClientRequest Build(const std::string& method, const std::string& key,
                            const std::map<std::string, std::string>& query,
                            const std::map<std::string, std::string>& extra, std::string_view body) {
    std::string uri = "/" + config_.bucket + (key.empty() ? "" : "/" + PercentEncode(key, true));
    std::string target = uri;
    char sep = '?';
    for (const auto& [k, v] : query) {
      target += sep + PercentEncode(k) + "=" + PercentEncode(v);
      sep = '&';
    }
    std::string payload_sha = body.empty() ? std::string(kEmptySha) : Sha256Hex(body);
    std::map<std::string, std::string> headers = extra;
    headers["host"] = endpoint_.host_header;
    headers["x-amz-date"] = AmzDate(std::time(nullptr));
    headers["x-amz-content-sha256"] = payload_sha;
    std::string auth = SigV4Authorization(method, uri, query, headers, payload_sha, config_.access_key,
                                          config_.secret_key, config_.region);
    http::ClientRequest req;
    req.method = method;
    req.target = target;
    req.headers.assign(headers.begin(), headers.end());
    req.headers.emplace_back("authorization", auth);
    req.body = std::string(body);
    return req;
  }

  ObjectInfo InfoFrom(const std::string& key, const Response& r) const {
    ObjectInfo info;
    info.key = key;
    info.sha256 = r.Header("x-amz-meta-sha256");
    info.mtime_ms = ParseTimeMs(r.Header("last-modified"));
    return info;
  }

  // S3's answer as a Status: the user's mistakes keep their code; the
  // backend's (credentials, 5xx) are Unavailable and name the backend.
  Status ErrorFor(const Response& r, const std::string& what) const {
    std::string code = XmlFirst(r.body, "Code"), message = XmlFirst(r.body, "Message");
    std::string detail = fmt::format("{} {}{}{}", r.status, code.empty() ? "" : code, message.empty() ? "" : ": ",
                                     Printable(message, 200));
    if (r.status == 404 && code != "NoSuchBucket") return NotFound(what + ": no such file");
    if (r.status == 416) return InvalidArgument(what + ": range not satisfiable");
    if (r.status == 412) return Aborted(what + ": changed by another writer");
    return Unavailable(fmt::format("{}: {}: {}", Where(), what, detail));
  }

  const S3Config& config() const { return config_; }

 private:
  http::ClientTarget Target() const {
    http::ClientTarget t;
    t.transport = endpoint_.tls ? http::ClientTarget::Transport::kTls : http::ClientTarget::Transport::kTcp;
    t.host = endpoint_.host;
    t.port = endpoint_.port;
    t.host_header = endpoint_.host_header;
    t.ca_file = config_.ca_file;
    return t;
  }
  http::ClientOptions Options() const {
    http::ClientOptions o;
    o.connect_timeout = o.io_timeout = std::chrono::milliseconds(config_.timeout_ms);
    o.max_idle = 16;
    o.quick_ack = true;  // RGW sends head and body in two segments
    o.prefix = Where() + ": ";
    o.peer = config_.endpoint;
    return o;
  }

  S3Config config_;
  Endpoint endpoint_;
  http::Client client_;
};

// ---- writer

Status S3Writer::Write(std::string_view data) {
  if (done_) return FailedPrecondition("write after commit or abort");
  if (options_.max_bytes && written_ + data.size() > *options_.max_bytes) {
    Abort();
    return ResourceExhausted(fmt::format("{}: over the limit of {} bytes", key_, *options_.max_bytes));
  }
  hash_.Update(data);
  written_ += data.size();
  size_t part = store_->config().part_size;
  while (!data.empty()) {
    size_t take = std::min(data.size(), part - buffer_.size());
    buffer_.append(data.substr(0, take));
    data.remove_prefix(take);
    if (buffer_.size() == part) {
      if (Status s = StartPart(); !s.ok()) {
        Abort();
        return s;
      }
    }
  }
  return Status::Ok();
}

Status S3Writer::StartUpload() {
  if (!upload_id_.empty()) return Status::Ok();
  std::map<std::string, std::string> extra;
  if (!options_.expected_sha256.empty()) extra["x-amz-meta-sha256"] = options_.expected_sha256;
  RM_ASSIGN_OR_RETURN(Response r, store_->Do("POST", store_->ObjectPath(key_), {{"uploads", ""}}, extra, ""));
  if (r.status != 200) return store_->ErrorFor(r, "start uploading " + key_);
  upload_id_ = XmlFirst(r.body, "UploadId");
  if (upload_id_.empty()) return Unavailable(store_->Where() + ": no UploadId in the answer to starting " + key_);
  return Status::Ok();
}

Status S3Writer::WaitPart() {
  if (!inflight_.valid()) return Status::Ok();
  return inflight_.get();
}

Status S3Writer::StartPart() {
  RM_RETURN_IF_ERROR(StartUpload());
  RM_RETURN_IF_ERROR(WaitPart());  // before parts_ grows: the thread writes its own entry
  const int number = static_cast<int>(parts_.size()) + 1;
  parts_.emplace_back(number, "");
  std::string* etag = &parts_.back().second;  // stable until the next StartPart, which waits first
  std::string body = std::move(buffer_);
  buffer_ = std::string();
  buffer_.reserve(body.size());
  inflight_ = std::async(std::launch::async, [this, number, etag, body = std::move(body)]() -> Status {
    RM_ASSIGN_OR_RETURN(Response r, store_->Do("PUT", store_->ObjectPath(key_),
                                               {{"partNumber", std::to_string(number)}, {"uploadId", upload_id_}}, {}, body));
    if (r.status != 200) return store_->ErrorFor(r, fmt::format("upload part {} of {}", number, key_));
    *etag = r.Header("etag");
    return Status::Ok();
  });
  return Status::Ok();
}

StatusOr<ObjectInfo> S3Writer::Commit() {
  if (done_) return FailedPrecondition("commit after commit or abort");
  std::string sha = hash_.FinishHex();
  if (!options_.expected_sha256.empty() && sha != options_.expected_sha256) {
    Abort();
    return InvalidArgument(fmt::format("{}: SHA-256 mismatch: the bytes hash to {}, expected {}", key_, sha,
                                       options_.expected_sha256));
  }
  ObjectInfo info{key_, written_, sha, 0};
  if (upload_id_.empty()) {
    done_ = true;
    RM_ASSIGN_OR_RETURN(Response r, store_->Do("PUT", store_->ObjectPath(key_), {},
                                               {{"x-amz-meta-sha256", sha}}, buffer_));
    buffer_.clear();
    if (r.status != 200) return store_->ErrorFor(r, "store " + key_);
  } else {
    Status last = buffer_.empty() ? Status::Ok() : StartPart();
    if (Status w = WaitPart(); last.ok()) last = w;
    if (!last.ok()) {
      Abort();
      return last;
    }
    std::string xml = "<CompleteMultipartUpload>";
    for (const auto& [number, etag] : parts_) {
      xml += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", number, XmlEscape(etag));
    }
    xml += "</CompleteMultipartUpload>";
    auto done = store_->Do("POST", store_->ObjectPath(key_), {{"uploadId", upload_id_}}, {}, xml);
    // A 200 may still carry an <Error> (S3 reports late failures that way).
    if (!done.ok() || done->status != 200 || done->body.find("<Error>") != std::string::npos) {
      Status s = done.ok() ? store_->ErrorFor(*done, "finish uploading " + key_) : done.status();
      Abort();
      return s;
    }
    done_ = true;
    upload_id_.clear();
    if (options_.expected_sha256.empty()) {
      // Label the object with its checksum: a copy onto itself that replaces
      // the metadata, only if it is still the object we just completed.
      std::string etag = XmlFirst(done->body, "ETag");
      std::map<std::string, std::string> extra = {
          {"x-amz-copy-source", "/" + store_->config().bucket + "/" + PercentEncode(store_->ObjectPath(key_), true)},
          {"x-amz-metadata-directive", "REPLACE"},
          {"x-amz-meta-sha256", sha}};
      if (!etag.empty()) extra["x-amz-copy-source-if-match"] = etag;
      RM_ASSIGN_OR_RETURN(Response r, store_->Do("PUT", store_->ObjectPath(key_), {}, extra, ""));
      if (r.status == 412) return info;  // replaced meanwhile: ours is already gone
      if (r.status != 200 || r.body.find("<Error>") != std::string::npos) return store_->ErrorFor(r, "label " + key_);
    }
  }
  info.mtime_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
  return info;
}

void S3Writer::Abort() {
  done_ = true;
  (void)WaitPart();  // the part in flight uses this writer
  buffer_.clear();
  buffer_.shrink_to_fit();
  if (!upload_id_.empty()) {
    // Best effort: a failed abort leaves parts that RGW's lifecycle (or a
    // later abort) removes; the object itself was never created.
    (void)store_->Do("DELETE", store_->ObjectPath(key_), {{"uploadId", upload_id_}}, {}, "");
    upload_id_.clear();
  }
}

// ---- reader

StatusOr<size_t> S3Reader::Read(char* buf, size_t n) {
  if (!stream_ || remaining_ == 0) {
    // Let the client see the end of the message so the connection can be reused.
    if (stream_ && !stream_->done()) (void)stream_->ReadSome(buf, n);
    return size_t{0};
  }
  // Fill the caller's buffer (a socket read brings what one segment or two
  // hold; handing each on costs the caller a round trip).
  const size_t want = static_cast<size_t>(std::min<uint64_t>(n, remaining_));
  size_t got = 0;
  while (got < want) {
    auto some = stream_->ReadSome(buf + got, want - got);
    if (!some.ok()) return Unreachable(some.status());
    got += *some;
    if (*some == 0 || stream_->done()) break;
  }
  if (got == 0) return Unavailable(where_ + ": " + info_.key + ": the body ended early");
  remaining_ -= got;
  return got;
}

}  // namespace

StatusOr<std::unique_ptr<BlobStore>> NewS3BlobStore(const S3Config& config) {
  RM_ASSIGN_OR_RETURN(Endpoint endpoint, ParseEndpoint(config.endpoint));
  auto store = std::make_unique<S3Store>(config, endpoint);
  RM_RETURN_IF_ERROR(store->EnsureBucket());
  return std::unique_ptr<BlobStore>(std::move(store));
}

}  // namespace ringmaster::files
