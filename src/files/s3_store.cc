#include "files/s3_store.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <variant>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <fmt/format.h>

#include "common/json_limits.h"
#include "files/hashing.h"
#include "files/s3_protocol.h"

namespace ringmaster::files {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr std::string_view kEmptySha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// ---- one keep-alive connection, every wait bounded by a deadline

class Conn {
 public:
  Conn(const S3Config& config, asio::ssl::context* tls) : config_(config) {
    if (tls) tls_.emplace(ioc_, *tls);
    else plain_.emplace(ioc_);
  }

  // Runs the io_context until the async op started by `start` completes or
  // the stream's deadline passes (the op then fails with timeout).
  template <typename Start>
  beast::error_code Run(Start&& start) {
    beast::error_code result = asio::error::would_block;
    Lowest().expires_after(std::chrono::milliseconds(config_.timeout_ms));
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    ioc_.restart();
    ioc_.run();
    return result;
  }

  Status Connect(const std::string& host, const std::string& port) {
    tcp::resolver resolver(ioc_);
    beast::error_code ec;
    auto endpoints = resolver.resolve(host, port, ec);
    if (ec) return Failed("resolve " + host, ec);
    ec = Run([&](auto handler) { Lowest().async_connect(endpoints, handler); });
    if (ec) return Failed("connect", ec);
    Lowest().socket().set_option(tcp::no_delay(true));
    if (tls_) {
      if (!SSL_set_tlsext_host_name(tls_->native_handle(), host.c_str())) return Unavailable(Where() + ": TLS SNI");
      tls_->set_verify_callback(asio::ssl::host_name_verification(host));
      ec = Run([&](auto handler) { tls_->async_handshake(asio::ssl::stream_base::client, handler); });
      if (ec) return Failed("TLS handshake", ec);
    }
    return Status::Ok();
  }

  template <typename Message>
  beast::error_code Write(Message& msg) {
    if (tls_) return Run([&](auto handler) { http::async_write(*tls_, msg, handler); });
    return Run([&](auto handler) { http::async_write(*plain_, msg, handler); });
  }

  // Acknowledge at once what arrives: a server that sends its head and body in
  // two segments (RGW does, with Nagle on) otherwise waits for our delayed
  // ACK, 40 ms per small GET. Linux clears the flag after use, so each read sets it.
  void QuickAck() {
    int one = 1;
    ::setsockopt(Lowest().socket().native_handle(), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
  }

  template <typename Parser>
  beast::error_code ReadHeader(Parser& parser) {
    QuickAck();
    if (tls_) return Run([&](auto handler) { http::async_read_header(*tls_, buffer_, parser, handler); });
    return Run([&](auto handler) { http::async_read_header(*plain_, buffer_, parser, handler); });
  }

  template <typename Parser>
  beast::error_code ReadSome(Parser& parser) {
    QuickAck();
    if (tls_) return Run([&](auto handler) { http::async_read_some(*tls_, buffer_, parser, handler); });
    return Run([&](auto handler) { http::async_read_some(*plain_, buffer_, parser, handler); });
  }

  template <typename Parser>
  beast::error_code Read(Parser& parser) {
    QuickAck();
    if (tls_) return Run([&](auto handler) { http::async_read(*tls_, buffer_, parser, handler); });
    return Run([&](auto handler) { http::async_read(*plain_, buffer_, parser, handler); });
  }

  std::string Where() const { return "storage backend s3 (" + config_.endpoint + ")"; }

  Status Failed(const std::string& what, const beast::error_code& ec) const {
    if (ec == beast::error::timeout) {
      return Unavailable(fmt::format("{}: {}: no answer in {} ms", Where(), what, config_.timeout_ms));
    }
    return Unavailable(fmt::format("{}: {}: {}", Where(), what, ec.message()));
  }

 private:
  beast::tcp_stream& Lowest() { return tls_ ? beast::get_lowest_layer(*tls_) : *plain_; }

  const S3Config& config_;
  asio::io_context ioc_;
  std::optional<beast::tcp_stream> plain_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls_;
  beast::flat_buffer buffer_;
};

struct Response {
  unsigned status = 0;
  http::fields headers;
  std::string body;
};

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
  S3Reader(S3Store* store, std::unique_ptr<Conn> conn, std::unique_ptr<http::response_parser<http::buffer_body>> parser,
           ObjectInfo info, uint64_t remaining)
      : store_(store), conn_(std::move(conn)), parser_(std::move(parser)), info_(std::move(info)), remaining_(remaining) {}
  ~S3Reader() override;
  const ObjectInfo& info() const override { return info_; }
  StatusOr<size_t> Read(char* buf, size_t n) override;

 private:
  S3Store* store_;
  std::unique_ptr<Conn> conn_;
  std::unique_ptr<http::response_parser<http::buffer_body>> parser_;
  ObjectInfo info_;
  uint64_t remaining_;
};

class S3Store : public BlobStore {
 public:
  S3Store(S3Config config, Endpoint endpoint) : config_(std::move(config)), endpoint_(std::move(endpoint)) {
    if (endpoint_.tls) {
      tls_.emplace(asio::ssl::context::tls_client);
      tls_->set_default_verify_paths();
      if (!config_.ca_file.empty()) tls_->load_verify_file(config_.ca_file);
      tls_->set_verify_mode(asio::ssl::verify_peer);
    }
  }

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
    RM_ASSIGN_OR_RETURN(Response r, Do(http::verb::head, "", {}, {}, ""));
    if (r.status == 200) return Status::Ok();
    if (r.status != 404) return ErrorFor(r, "bucket " + config_.bucket);
    RM_ASSIGN_OR_RETURN(r, Do(http::verb::put, "", {}, {}, ""));
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
      return std::unique_ptr<BlobReader>(new S3Reader(this, nullptr, nullptr, info, 0));
    }
    std::map<std::string, std::string> extra;
    if (range.offset > 0 || range.length) {
      extra["range"] = range.length ? fmt::format("bytes={}-{}", range.offset, range.offset + *range.length - 1)
                                    : fmt::format("bytes={}-", range.offset);
    }
    for (int attempt = 0;; ++attempt) {
      bool reused = false;
      RM_ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, Acquire(&reused));
      auto req = Build(http::verb::get, ObjectPath(key), {}, extra, "");
      if (auto ec = conn->Write(req)) {
        if (reused && attempt == 0) continue;
        return conn->Failed("send GET", ec);
      }
      auto parser = std::make_unique<http::response_parser<http::buffer_body>>();
      parser->body_limit(std::numeric_limits<std::uint64_t>::max());
      if (auto ec = conn->ReadHeader(*parser)) {
        if (reused && attempt == 0 && (ec == http::error::end_of_stream || ec == asio::error::connection_reset)) continue;
        return conn->Failed("read the answer to GET", ec);
      }
      auto& res = parser->get();
      unsigned status = res.result_int();
      if (status != 200 && status != 206) {
        Response r{status, res.base(), ""};
        // Drain a small error body so the message can name S3's error code.
        auto small = std::make_unique<http::response_parser<http::string_body>>(std::move(*parser));
        small->body_limit(64 * 1024);
        conn->Read(*small);
        r.body = small->get().body();
        if (status == 416) {
          return InvalidArgument(fmt::format("range not satisfiable: offset {} of {}", range.offset, key));
        }
        return ErrorFor(r, key);
      }
      ObjectInfo info = InfoFrom(key, res.base());
      uint64_t length = res.has_content_length() ? *parser->content_length() : 0;
      if (status == 206) {
        // Content-Range: bytes 10-19/1000
        std::string cr(res.base()[http::field::content_range]);
        size_t slash = cr.rfind('/');
        if (slash != std::string::npos) info.size = std::strtoull(cr.c_str() + slash + 1, nullptr, 10);
      } else {
        info.size = length;
      }
      return std::unique_ptr<BlobReader>(new S3Reader(this, std::move(conn), std::move(parser), info, length));
    }
  }

  StatusOr<ObjectInfo> Head(const std::string& key) override {
    RM_RETURN_IF_ERROR(Check(key));
    RM_ASSIGN_OR_RETURN(Response r, Do(http::verb::head, ObjectPath(key), {}, {}, ""));
    if (r.status != 200) return ErrorFor(r, key);
    ObjectInfo info = InfoFrom(key, r.headers);
    info.size = std::strtoull(std::string(r.headers[http::field::content_length]).c_str(), nullptr, 10);
    return info;
  }

  StatusOr<ListResult> List(const std::string& prefix, const std::string& after, size_t limit) override {
    if (limit == 0 || limit > 1000) return InvalidArgument("limit: must be 1..1000");
    std::map<std::string, std::string> query = {
        {"list-type", "2"}, {"prefix", config_.prefix + prefix}, {"max-keys", std::to_string(limit)}};
    if (!after.empty()) query["start-after"] = config_.prefix + after;
    RM_ASSIGN_OR_RETURN(Response r, Do(http::verb::get, "", query, {}, ""));
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
    RM_ASSIGN_OR_RETURN(Response r, Do(http::verb::delete_, ObjectPath(key), {}, {}, ""));
    if (r.status != 204 && r.status != 200) return ErrorFor(r, key);
    return Status::Ok();
  }

  // ---- plumbing used by the writer and reader

  std::string ObjectPath(const std::string& key) const { return config_.prefix + key; }

  // One request with a body held in memory; the response body read whole
  // (S3's XML answers are small). Retried once on a fresh connection when a
  // kept-alive one turns out to have been closed by the server.
  StatusOr<Response> Do(http::verb method, const std::string& key, const std::map<std::string, std::string>& query,
                        const std::map<std::string, std::string>& extra, std::string_view body) {
    for (int attempt = 0;; ++attempt) {
      bool reused = false;
      RM_ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, Acquire(&reused));
      auto req = Build(method, key, query, extra, body);
      std::string verb(http::to_string(method));
      if (auto ec = conn->Write(req)) {
        if (reused && attempt == 0) continue;
        return conn->Failed("send " + verb, ec);
      }
      http::response_parser<http::string_body> parser;
      parser.body_limit(16 << 20);
      if (method == http::verb::head) parser.skip(true);
      if (auto ec = conn->Read(parser)) {
        if (reused && attempt == 0 && (ec == http::error::end_of_stream || ec == asio::error::connection_reset)) continue;
        return conn->Failed("read the answer to " + verb, ec);
      }
      auto& res = parser.get();
      Response r{res.result_int(), res.base(), std::move(res.body())};
      if (res.keep_alive()) Release(std::move(conn));
      return r;
    }
  }

  http::request<http::string_body> Build(http::verb method, const std::string& key,
                                         const std::map<std::string, std::string>& query,
                                         const std::map<std::string, std::string>& extra, std::string_view body) {
    std::string uri = "/" + config_.bucket + (key.empty() ? "" : "/" + UriEncode(key, true));
    std::string target = uri;
    char sep = '?';
    for (const auto& [k, v] : query) {
      target += sep + UriEncode(k, false) + "=" + UriEncode(v, false);
      sep = '&';
    }
    std::string payload_sha = body.empty() ? std::string(kEmptySha) : Sha256HexOf(body);
    std::map<std::string, std::string> headers = extra;
    headers["host"] = endpoint_.host_header;
    headers["x-amz-date"] = AmzDate(std::time(nullptr));
    headers["x-amz-content-sha256"] = payload_sha;
    std::string auth = SigV4Authorization(std::string(http::to_string(method)), uri, query, headers, payload_sha,
                                          config_.access_key, config_.secret_key, config_.region);
    http::request<http::string_body> req{method, target, 11};
    for (const auto& [k, v] : headers) req.set(k, v);
    req.set(http::field::authorization, auth);
    req.set(http::field::user_agent, "ringmaster");
    req.keep_alive(true);
    req.body() = std::string(body);
    if (method != http::verb::get && method != http::verb::head) req.prepare_payload();
    return req;
  }

  StatusOr<std::unique_ptr<Conn>> Acquire(bool* reused) {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        auto conn = std::move(idle_.back());
        idle_.pop_back();
        *reused = true;
        return conn;
      }
    }
    *reused = false;
    auto conn = std::make_unique<Conn>(config_, tls_ ? &*tls_ : nullptr);
    RM_RETURN_IF_ERROR(conn->Connect(endpoint_.host, endpoint_.port));
    return conn;
  }

  void Release(std::unique_ptr<Conn> conn) {
    std::lock_guard lock(mu_);
    if (idle_.size() < 16) idle_.push_back(std::move(conn));
  }

  ObjectInfo InfoFrom(const std::string& key, const http::fields& h) const {
    ObjectInfo info;
    info.key = key;
    info.sha256 = std::string(h["x-amz-meta-sha256"]);
    info.mtime_ms = ParseTimeMs(std::string(h[http::field::last_modified]));
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
  S3Config config_;
  Endpoint endpoint_;
  std::optional<asio::ssl::context> tls_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Conn>> idle_;
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
  RM_ASSIGN_OR_RETURN(Response r, store_->Do(http::verb::post, store_->ObjectPath(key_), {{"uploads", ""}}, extra, ""));
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
    RM_ASSIGN_OR_RETURN(Response r, store_->Do(http::verb::put, store_->ObjectPath(key_),
                                               {{"partNumber", std::to_string(number)}, {"uploadId", upload_id_}}, {}, body));
    if (r.status != 200) return store_->ErrorFor(r, fmt::format("upload part {} of {}", number, key_));
    *etag = std::string(r.headers[http::field::etag]);
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
    RM_ASSIGN_OR_RETURN(Response r, store_->Do(http::verb::put, store_->ObjectPath(key_), {},
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
    auto done = store_->Do(http::verb::post, store_->ObjectPath(key_), {{"uploadId", upload_id_}}, {}, xml);
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
          {"x-amz-copy-source", "/" + store_->config().bucket + "/" + UriEncode(store_->ObjectPath(key_), true)},
          {"x-amz-metadata-directive", "REPLACE"},
          {"x-amz-meta-sha256", sha}};
      if (!etag.empty()) extra["x-amz-copy-source-if-match"] = etag;
      RM_ASSIGN_OR_RETURN(Response r, store_->Do(http::verb::put, store_->ObjectPath(key_), {}, extra, ""));
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
    (void)store_->Do(http::verb::delete_, store_->ObjectPath(key_), {{"uploadId", upload_id_}}, {}, "");
    upload_id_.clear();
  }
}

// ---- reader

S3Reader::~S3Reader() {
  // A fully read body leaves the connection reusable; anything else closes it.
  if (conn_ && parser_ && parser_->is_done() && parser_->get().keep_alive()) store_->Release(std::move(conn_));
}

StatusOr<size_t> S3Reader::Read(char* buf, size_t n) {
  if (!parser_ || remaining_ == 0) {
    if (parser_ && !parser_->is_done()) {
      // Let the parser see the end of the message so the connection can be reused.
      parser_->get().body().data = buf;
      parser_->get().body().size = n;
      conn_->ReadSome(*parser_);
    }
    return size_t{0};
  }
  // Fill the caller's buffer (a socket read brings what one segment or two
  // hold; handing each on costs the caller a round trip).
  auto& body = parser_->get().body();
  const size_t want = static_cast<size_t>(std::min<uint64_t>(n, remaining_));
  size_t got = 0;
  while (got < want) {
    body.data = buf + got;
    body.size = want - got;
    auto ec = conn_->ReadSome(*parser_);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return conn_->Failed("read " + info_.key, ec);
    got = want - body.size;
    if (parser_->is_done()) break;
  }
  if (got == 0) return Unavailable(conn_->Where() + ": " + info_.key + ": the body ended early");
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
