#include "agent/container/docker/docker_api.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "common/crypto.h"

#include "common/json_limits.h"
#include "common/strings.h"
#include "http/client.h"
#include "protocol/image_ref.h"

namespace ringmaster::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr std::string_view kApiPrefix = "/v1.41";
constexpr size_t kMaxBody = 16 << 20;      // a hostile daemon cannot bloat the agent
constexpr size_t kMaxErrorBody = 64 << 10;  // error answers of streaming calls
constexpr size_t kFileChunk = 1 << 20;

// One connection per call (no keep-alive), bounded by the call's deadline
// rather than per wait: a slow daemon that trickles bytes still ends in time.
std::unique_ptr<http::Client> NewClient(const std::string& socket_path, std::chrono::milliseconds connect_timeout) {
  http::ClientTarget target;
  target.transport = http::ClientTarget::Transport::kUnix;
  target.socket_path = socket_path;
  target.host_header = "docker";
  http::ClientOptions options;
  options.connect_timeout = connect_timeout;
  options.io_timeout = std::chrono::milliseconds::max();
  options.prefix = "docker: ";
  return std::make_unique<http::Client>(std::move(target), std::move(options));
}

// ---- requests and answers

struct Reply {
  unsigned status = 0;
  std::string body;
};

// Ids and names go into the URL path unencoded (Docker's router matches the
// decoded path, so encoding would not keep a '/' from changing the route):
// refuse anything outside what Docker itself accepts.
Status CheckContainerId(const std::string& id) {
  bool ok = !id.empty() && id.size() <= 256 && std::all_of(id.begin(), id.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '.' || c == '-';
  });
  if (!ok) return InvalidArgument(fmt::format("docker: '{}' is not a container id or name", Printable(id, 80)));
  return Status::Ok();
}

Status CheckImageRef(const std::string& ref) {
  if (auto parsed = protocol::ParseImageRef(ref); !parsed.ok()) {
    return InvalidArgument(fmt::format("docker: '{}' is not an image reference: {}", Printable(ref, 80), parsed.status().message()));
  }
  return Status::Ok();
}

// nlohmann's dump() throws on invalid UTF-8 in a string.
StatusOr<std::string> Dump(const json& j, const std::string& what) {
  try {
    return j.dump();
  } catch (const std::exception& e) {
    return InvalidArgument(fmt::format("docker: {}: {}", what, e.what()));
  }
}

// The daemon's refusal as a Status, keeping its message ({"message": "..."}).
Status ErrorFor(const Reply& r, const std::string& what) {
  std::string message;
  auto parsed = ParseJson(r.body, {.max_bytes = kMaxBody, .max_depth = 8}, "docker's answer");
  if (parsed.ok() && parsed->is_object() && parsed->contains("message") && (*parsed)["message"].is_string()) {
    message = Printable((*parsed)["message"].get<std::string>(), 500);
  } else {
    message = Printable(r.body, 200);
  }
  const bool said = !message.empty();
  std::string text = fmt::format("docker: {}: {}", what, said ? message : fmt::format("HTTP {}", r.status));
  switch (r.status) {
    case 400: return InvalidArgument(text);
    case 401:
    case 403: return PermissionDenied(text);
    case 404: return NotFound(text);
    case 409: return FailedPrecondition(text);
    case 502:
    case 503:
    case 504: return Unavailable(text);
    default: return Internal(said ? fmt::format("{} (HTTP {})", text, r.status) : text);
  }
}

StatusOr<json> ParseReply(const Reply& r, const std::string& what) {
  auto parsed = ParseJson(r.body, {.max_bytes = kMaxBody, .max_depth = 64}, "docker's answer");
  if (!parsed.ok()) return Internal(fmt::format("docker: {}: {}", what, parsed.status().message()));
  return parsed;
}

// One request with an in-memory body; the answer read whole (up to kMaxBody)
// before `timeout` from now.
// Docker's answer to an image pull or import: 200 and then a stream of JSON
// lines (progress, the image id, or an error that ends it).
Status CheckProgress(std::string_view rest, const std::string& what) {
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto message = ParseJson(line, {.max_bytes = kMaxBody, .max_depth = 8}, "docker's progress line");
    if (!message.ok()) return Internal(fmt::format("docker: {}: {}", what, message.status().message()));
    if (message->is_object() && message->contains("error")) {
      const json& error = (*message)["error"];
      return Internal(fmt::format("docker: {}: {}", what,
                                  Printable(error.is_string() ? error.get<std::string>() : error.dump(), 500)));
    }
  }
  return Status::Ok();
}

// URL-safe base64 (RFC 4648 section 5), as X-Registry-Auth takes it.
std::string Base64UrlEncode(std::string_view in) {
  std::string out = Base64Encode(in);
  for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  return out;
}

StatusOr<Reply> Call(const std::string& socket_path, const std::string& method, const std::string& target,
                     std::string body, std::chrono::milliseconds timeout, const std::string& what) {
  auto client = NewClient(socket_path, timeout);
  http::ClientRequest req;
  req.method = method;
  req.target = std::string(kApiPrefix) + target;
  if (!body.empty()) req.headers.emplace_back("Content-Type", "application/json");
  req.body = std::move(body);
  RM_ASSIGN_OR_RETURN(http::ClientResponse r,
                      client->Do(req, {.what = what, .deadline = SteadyClock::now() + timeout, .max_body = kMaxBody}));
  return Reply{static_cast<unsigned>(r.status), std::move(r.body)};
}

// ---- timestamps

bool Digits(std::string_view s, size_t pos, size_t n, int* out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

// A cheap look before parsing: "2026-12-03T15:04:05".
bool LooksLikeTimestamp(std::string_view s) {
  return s.size() >= 20 && s[4] == '-' && s[7] == '-' && s[10] == 'T' && s[13] == ':' && s[16] == ':';
}

// Takes "<timestamp> " off the front of `text`, if there is one.
std::string_view TakeTimestamp(std::string_view& text) {
  size_t space = text.substr(0, 48).find(' ');
  if (space == std::string_view::npos) return {};
  std::string_view ts = text.substr(0, space);
  if (!LooksLikeTimestamp(ts) || !DockerApi::ParseDockerTimestamp(ts).ok()) return {};
  text.remove_prefix(space + 1);
  return ts;
}

}  // namespace

// ---- DockerApi

DockerApi::DockerApi(std::string socket_path, std::chrono::milliseconds deadline)
    : socket_path_(std::move(socket_path)), deadline_(deadline) {}

Status DockerApi::Ping() const {
  RM_ASSIGN_OR_RETURN(Reply r, Call(socket_path_, "GET", "/_ping", "", deadline_, "ping"));
  if (r.status != 200) return ErrorFor(r, "ping");
  return Status::Ok();
}

StatusOr<nlohmann::json> DockerApi::Version() const {
  RM_ASSIGN_OR_RETURN(Reply r, Call(socket_path_, "GET", "/version", "", deadline_, "version"));
  if (r.status != 200) return ErrorFor(r, "version");
  return ParseReply(r, "version");
}

StatusOr<nlohmann::json> DockerApi::Info() const {
  RM_ASSIGN_OR_RETURN(Reply r, Call(socket_path_, "GET", "/info", "", deadline_, "info"));
  if (r.status != 200) return ErrorFor(r, "info");
  return ParseReply(r, "info");
}

StatusOr<nlohmann::json> DockerApi::InspectImage(const std::string& ref) const {
  RM_RETURN_IF_ERROR(CheckImageRef(ref));
  const std::string what = "inspect image " + ref;
  RM_ASSIGN_OR_RETURN(Reply r, Call(socket_path_, "GET", "/images/" + ref + "/json", "", deadline_, what));
  if (r.status != 200) return ErrorFor(r, what);
  return ParseReply(r, what);
}

Status DockerApi::ImportImage(const std::string& tar_path, const std::string& repo, const std::string& tag,
                              const std::vector<std::string>& changes, std::chrono::milliseconds timeout) const {
  const std::string what = repo.empty() ? fmt::format("import {}", tar_path)
                                         : fmt::format("import {} as {}:{}", tar_path, repo, tag.empty() ? "latest" : tag);
  if (!repo.empty()) RM_RETURN_IF_ERROR(CheckImageRef(repo));
  int fd = ::open(tar_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::string message = fmt::format("docker: {}: cannot open: {}", what, std::strerror(errno));
    if (errno == ENOENT) return NotFound(message);
    if (errno == EACCES) return PermissionDenied(message);
    return Internal(message);
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return InvalidArgument(fmt::format("docker: {}: not a regular file", what));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);

  std::string target = std::string(kApiPrefix) + "/images/create?fromSrc=-";
  if (!repo.empty()) target += "&repo=" + PercentEncode(repo);
  if (!tag.empty()) target += "&tag=" + PercentEncode(tag);
  for (const std::string& change : changes) target += "&changes=" + PercentEncode(change);

  // The file goes in chunks straight onto the socket: the tar (about
  // 1.3 GB) never sits in memory. Without a Content-Type, Go parses a POST
  // body as a form and chokes on the tar's bytes.
  http::ClientRequest req;
  req.method = "POST";
  req.target = target;
  req.headers.emplace_back("Content-Type", "application/x-tar");
  req.body_size = size;
  uint64_t sent = 0;
  req.body_source = [&](char* buf, size_t n) -> StatusOr<size_t> {
    for (;;) {
      ssize_t got = ::read(fd, buf, std::min<uint64_t>(std::min(n, kFileChunk), size - sent));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        return Internal(fmt::format("docker: {}: reading the file after {} of {} bytes: {}", what, sent, size,
                                    got < 0 ? std::strerror(errno) : "it shrank"));
      }
      sent += static_cast<uint64_t>(got);
      return static_cast<size_t>(got);
    }
  };
  // A daemon that refuses early (a bad name) answers and closes without
  // reading the rest: the client then reads its answer, which says why.
  auto client = NewClient(socket_path_, timeout);
  RM_ASSIGN_OR_RETURN(http::ClientResponse reply,
                      client->Do(req, {.what = what, .deadline = SteadyClock::now() + timeout, .max_body = kMaxBody}));
  Reply r{static_cast<unsigned>(reply.status), std::move(reply.body)};
  if (r.status != 200) return ErrorFor(r, what);
  RM_RETURN_IF_ERROR(CheckProgress(r.body, what));
  if (!reply.send_error.ok()) return reply.send_error;  // a 200 that did not read it all
  return Status::Ok();
}

Status DockerApi::PullImage(const std::string& ref, const std::string& auth_json, std::chrono::milliseconds timeout,
                            const std::function<bool()>& stop) const {
  const std::string what = "pull " + ref;
  RM_RETURN_IF_ERROR(CheckImageRef(ref));
  // fromImage takes the whole reference, digest included (Docker splits it).
  http::ClientRequest req;
  req.method = "POST";
  req.target = std::string(kApiPrefix) + "/images/create?fromImage=" + PercentEncode(ref);
  // The registry login rides in this header only for the pull: dockerd does
  // not keep it, and it is never in a container's config.
  if (!auth_json.empty()) req.headers.emplace_back("X-Registry-Auth", Base64UrlEncode(auth_json));
  auto client = NewClient(socket_path_, timeout);
  http::CallOptions call{.what = what, .deadline = SteadyClock::now() + timeout, .max_body = kMaxBody};
  if (stop) {
    call.poll = std::chrono::milliseconds(200);
    call.stop = stop;
  }
  RM_ASSIGN_OR_RETURN(http::ClientResponse reply, client->Do(req, call));
  Reply r{static_cast<unsigned>(reply.status), std::move(reply.body)};
  if (r.status == 404) return NotFound(ErrorFor(r, what).message());
  if (r.status != 200) return ErrorFor(r, what);
  return CheckProgress(r.body, what);
}

StatusOr<std::string> DockerApi::CreateContainer(const std::string& name, const nlohmann::json& config) const {
  std::string target = "/containers/create";
  if (!name.empty()) {
    RM_RETURN_IF_ERROR(CheckContainerId(name));
    target += "?name=" + PercentEncode(name);
  }
  const std::string what = "create container " + (name.empty() ? std::string("(unnamed)") : name);
  RM_ASSIGN_OR_RETURN(std::string body, Dump(config, what));
  RM_ASSIGN_OR_RETURN(Reply r, Call(socket_path_, "POST", target, std::move(body), deadline_, what));
  if (r.status == 409) return AlreadyExists(ErrorFor(r, what).message());
  if (r.status != 201 && r.status != 200) return ErrorFor(r, what);
  RM_ASSIGN_OR_RETURN(json reply, ParseReply(r, what));
  if (!reply.is_object() || !reply.contains("Id") || !reply["Id"].is_string() ||
      reply["Id"].get<std::string>().empty()) {
    return Internal(fmt::format("docker: {}: no Id in the answer", what));
  }
  return reply["Id"].get<std::string>();
}

Status DockerApi::StartContainer(const std::string& id) const {
  RM_RETURN_IF_ERROR(CheckContainerId(id));
  const std::string what = "start container " + id;
  RM_ASSIGN_OR_RETURN(Reply r,
                      Call(socket_path_, "POST", "/containers/" + id + "/start", "", deadline_, what));
  if (r.status == 204 || r.status == 304) return Status::Ok();  // 304: already running
  return ErrorFor(r, what);
}

Status DockerApi::KillContainer(const std::string& id, const std::string& signal) const {
  RM_RETURN_IF_ERROR(CheckContainerId(id));
  if (signal.empty()) return InvalidArgument("docker: kill: no signal");
  const std::string what = fmt::format("kill container {} with {}", id, Printable(signal));
  RM_ASSIGN_OR_RETURN(Reply r, Call(socket_path_, "POST",
                                    "/containers/" + id + "/kill?signal=" + PercentEncode(signal), "", deadline_, what));
  if (r.status == 204) return Status::Ok();
  return ErrorFor(r, what);
}

Status DockerApi::StopContainer(const std::string& id, int seconds) const {
  RM_RETURN_IF_ERROR(CheckContainerId(id));
  if (seconds < 0) return InvalidArgument("docker: stop: negative grace period");
  const std::string what = "stop container " + id;
  RM_ASSIGN_OR_RETURN(Reply r, Call(socket_path_, "POST",
                                    fmt::format("/containers/{}/stop?t={}", id, seconds), "",
                                    deadline_ + std::chrono::seconds(seconds), what));
  if (r.status == 204 || r.status == 304) return Status::Ok();  // 304: already stopped
  return ErrorFor(r, what);
}

Status DockerApi::RemoveContainer(const std::string& id, bool force) const {
  RM_RETURN_IF_ERROR(CheckContainerId(id));
  const std::string what = "remove container " + id;
  const std::string target = fmt::format("/containers/{}?force={}&v=1", id, force ? 1 : 0);
  RM_ASSIGN_OR_RETURN(Reply r, Call(socket_path_, "DELETE", target, "", deadline_, what));
  if (r.status == 204 || r.status == 404) return Status::Ok();  // 404: nothing to remove
  return ErrorFor(r, what);
}

StatusOr<nlohmann::json> DockerApi::InspectContainer(const std::string& id) const {
  RM_RETURN_IF_ERROR(CheckContainerId(id));
  const std::string what = "inspect container " + id;
  RM_ASSIGN_OR_RETURN(Reply r, Call(socket_path_, "GET", "/containers/" + id + "/json", "", deadline_, what));
  if (r.status != 200) return ErrorFor(r, what);
  return ParseReply(r, what);
}

StatusOr<int64_t> DockerApi::WaitContainer(const std::string& id, std::chrono::milliseconds deadline) const {
  RM_RETURN_IF_ERROR(CheckContainerId(id));
  const std::string what = "wait for container " + id;
  // dockerd sends the 200 head at once and the body when the container
  // stops, so running out of time here means it is still running.
  auto reply = Call(socket_path_, "POST", "/containers/" + id + "/wait?condition=not-running", "", deadline,
                    what);
  if (!reply.ok()) {
    if (reply.status().code() == StatusCode::kDeadlineExceeded) {
      return DeadlineExceeded(fmt::format("docker: container {} still running after {} ms", id, deadline.count()));
    }
    return reply.status();
  }
  if (reply->status != 200) return ErrorFor(*reply, what);
  RM_ASSIGN_OR_RETURN(json body, ParseReply(*reply, what));
  if (!body.is_object() || !body.contains("StatusCode") || !body["StatusCode"].is_number_integer()) {
    return Internal(fmt::format("docker: {}: no StatusCode in the answer", what));
  }
  if (body.contains("Error") && body["Error"].is_object() && body["Error"].contains("Message") &&
      body["Error"]["Message"].is_string() && !body["Error"]["Message"].get<std::string>().empty()) {
    return Internal(fmt::format("docker: {}: {}", what, Printable(body["Error"]["Message"].get<std::string>(), 500)));
  }
  return body["StatusCode"].get<int64_t>();
}

StatusOr<std::vector<nlohmann::json>> DockerApi::ListContainers(const std::map<std::string, std::string>& labels,
                                                                bool all) const {
  const std::string what = "list containers";
  std::string target = fmt::format("/containers/json?all={}", all ? 1 : 0);
  if (!labels.empty()) {
    // The map form {"label": {"k=v": true}} is what the docker CLI sends.
    json filters = {{"label", json::object()}};
    for (const auto& [k, v] : labels) filters["label"][v.empty() ? k : k + "=" + v] = true;
    RM_ASSIGN_OR_RETURN(std::string text, Dump(filters, what));
    target += "&filters=" + PercentEncode(text);
  }
  RM_ASSIGN_OR_RETURN(Reply r, Call(socket_path_, "GET", target, "", deadline_, what));
  if (r.status != 200) return ErrorFor(r, what);
  RM_ASSIGN_OR_RETURN(json body, ParseReply(r, what));
  if (!body.is_array()) return Internal(fmt::format("docker: {}: the answer is not an array", what));
  return std::vector<json>(body.begin(), body.end());
}

Status DockerApi::FollowLogs(const std::string& id, const LogOptions& options, const LogSink& sink) const {
  RM_RETURN_IF_ERROR(CheckContainerId(id));
  const std::string what = "logs of container " + id;
  std::string target = std::string(kApiPrefix) + "/containers/" + id +
                       "/logs?follow=1&stdout=1&stderr=1&timestamps=1";
  if (!options.since.empty()) target += "&since=" + PercentEncode(options.since);
  http::CallOptions call;
  call.what = what;
  call.poll = std::max(options.poll, std::chrono::milliseconds(10));
  call.stop = options.stop_requested;
  // Connecting is bounded by the API's deadline; reading is not (days of logs).
  auto client = NewClient(socket_path_, deadline_);
  http::ClientRequest req;
  req.target = target;
  auto opened = client->Open(req, call);
  if (!opened.ok()) return opened.status().code() == StatusCode::kAborted ? Status::Ok() : opened.status();
  http::ResponseStream& stream = **opened;
  if (stream.head().status != 200) {
    Reply r{static_cast<unsigned>(stream.head().status), ""};
    if (auto body = stream.ReadAll(kMaxErrorBody); body.ok()) r.body = std::move(*body);
    return ErrorFor(r, what);
  }

  DockerLogDemuxer demux(sink);
  std::string buf(64 << 10, '\0');
  for (;;) {
    auto n = stream.ReadSome(buf.data(), buf.size());
    if (!n.ok()) {
      if (n.status().code() == StatusCode::kAborted) return Status::Ok();  // stop_requested
      return n.status();
    }
    if (*n == 0) break;
    Status s = demux.Feed(std::string_view(buf.data(), *n));
    if (s.code() == StatusCode::kAborted) return Status::Ok();  // the sink's stop
    if (!s.ok()) return s.Annotate("docker: " + what);
  }
  Status s = demux.Finish();
  if (s.code() == StatusCode::kAborted) return Status::Ok();
  return s.ok() ? s : s.Annotate("docker: " + what);
}

StatusOr<int64_t> DockerApi::ParseDockerTimestamp(std::string_view ts) {
  auto bad = [&] { return InvalidArgument(fmt::format("'{}' is not an RFC 3339 timestamp", Printable(ts, 64))); };
  int year, month, day, hour, minute, second;
  if (!LooksLikeTimestamp(ts) || !Digits(ts, 0, 4, &year) || !Digits(ts, 5, 2, &month) || !Digits(ts, 8, 2, &day) ||
      !Digits(ts, 11, 2, &hour) || !Digits(ts, 14, 2, &minute) || !Digits(ts, 17, 2, &second)) {
    return bad();
  }
  size_t pos = 19;
  int64_t nanos = 0;
  if (pos < ts.size() && ts[pos] == '.') {
    ++pos;
    size_t digits = 0;
    for (; pos < ts.size() && ts[pos] >= '0' && ts[pos] <= '9'; ++pos, ++digits) {
      if (digits < 9) nanos = nanos * 10 + (ts[pos] - '0');  // finer than 1 ns is dropped
    }
    if (digits == 0) return bad();
    for (size_t i = digits; i < 9; ++i) nanos *= 10;
  }
  int64_t offset = 0;  // seconds east of UTC
  if (pos < ts.size() && ts[pos] == 'Z') {
    ++pos;
  } else if (pos < ts.size() && (ts[pos] == '+' || ts[pos] == '-')) {
    int oh, om;
    if (!Digits(ts, pos + 1, 2, &oh) || pos + 3 >= ts.size() || ts[pos + 3] != ':' || !Digits(ts, pos + 4, 2, &om) ||
        oh > 23 || om > 59) {
      return bad();
    }
    offset = (ts[pos] == '+' ? 1 : -1) * (oh * 3600 + om * 60);
    pos += 6;
  } else {
    return bad();
  }
  if (pos != ts.size()) return bad();
  const std::chrono::year_month_day date{std::chrono::year(year), std::chrono::month(month), std::chrono::day(day)};
  if (!date.ok() || hour > 23 || minute > 59 || second > 60) return bad();
  const int64_t days = std::chrono::sys_days(date).time_since_epoch().count();
  const int64_t seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset;
  // int64 nanoseconds reach from 1677 to 2262.
  if (seconds < std::numeric_limits<int64_t>::min() / 1'000'000'000 + 1 ||
      seconds > std::numeric_limits<int64_t>::max() / 1'000'000'000 - 1) {
    return InvalidArgument(fmt::format("'{}' is out of range", Printable(ts, 64)));
  }
  return seconds * 1'000'000'000 + nanos;
}

std::string DockerApi::FormatSince(int64_t unix_nanos) {
  if (unix_nanos < 0) unix_nanos = 0;  // Docker's form has no sign for the fraction
  return fmt::format("{}.{:09}", unix_nanos / 1'000'000'000, unix_nanos % 1'000'000'000);
}

// ---- DockerLogDemuxer

Status DockerLogDemuxer::Feed(std::string_view bytes) {
  if (stopped_) return Aborted("stopped by the sink");
  pending_.append(bytes);
  size_t pos = 0;
  Status status;
  while (status.ok() && pending_.size() - pos >= 8) {
    const auto* h = reinterpret_cast<const unsigned char*>(pending_.data() + pos);
    if (h[0] < 1 || h[0] > 3 || h[1] != 0 || h[2] != 0 || h[3] != 0) {
      status = FailedPrecondition("not Docker's multiplexed log stream (was the container created with Tty?)");
      break;
    }
    const uint32_t size = (uint32_t{h[4]} << 24) | (uint32_t{h[5]} << 16) | (uint32_t{h[6]} << 8) | h[7];
    if (size > kMaxFrame) {
      status = Internal(fmt::format("a log frame of {} bytes, over the limit of {}", size, kMaxFrame));
      break;
    }
    if (pending_.size() - pos - 8 < size) break;
    status = Frame(h[0], std::string_view(pending_.data() + pos + 8, size));
    pos += 8 + size;
  }
  if (!status.ok()) {
    pending_.clear();
    return status;
  }
  pending_.erase(0, pos);
  return Status::Ok();
}

Status DockerLogDemuxer::Frame(int stream, std::string_view payload) {
  // Stream 3 is the daemon's own error in the middle of the stream.
  if (stream == 3) return Internal("the daemon reported: " + Printable(payload, 500));
  Partial& p = partial_[stream];
  // Every frame starts with a timestamp, also one that continues a long
  // line (the line keeps its first); so may every line within a frame.
  std::string_view frame_ts = TakeTimestamp(payload);
  if (!p.open) p.ts = std::string(frame_ts);
  bool first = true;
  while (!payload.empty()) {
    if (!p.open && !first) {
      std::string_view ts = TakeTimestamp(payload);
      p.ts = std::string(ts.empty() ? frame_ts : ts);
    }
    first = false;
    size_t nl = payload.find('\n');
    std::string_view text = payload.substr(0, nl);
    payload.remove_prefix(nl == std::string_view::npos ? payload.size() : nl + 1);
    p.open = true;
    // Pass very long lines on in pieces rather than buffer them.
    while (p.text.size() + text.size() > kMaxLine) {
      size_t take = kMaxLine - p.text.size();
      p.text.append(text.substr(0, take));
      text.remove_prefix(take);
      if (!Emit(stream, p)) return Aborted("stopped by the sink");
    }
    p.text.append(text);
    if (nl != std::string_view::npos) {
      p.open = false;
      if (!Emit(stream, p)) return Aborted("stopped by the sink");
    }
  }
  return Status::Ok();
}

bool DockerLogDemuxer::Emit(int stream, Partial& p) {
  if (stopped_) return false;
  if (!sink_(stream, p.ts, p.text)) stopped_ = true;
  p.text.clear();
  return !stopped_;
}

Status DockerLogDemuxer::Finish() {
  for (int stream : {1, 2}) {
    Partial& p = partial_[stream];
    if (p.open && !p.text.empty()) {
      p.open = false;
      if (!Emit(stream, p)) return Aborted("stopped by the sink");
    }
  }
  if (!pending_.empty()) {
    return Internal(fmt::format("the stream ended inside a log frame ({} bytes)", pending_.size()));
  }
  return Status::Ok();
}

}  // namespace ringmaster::agent
