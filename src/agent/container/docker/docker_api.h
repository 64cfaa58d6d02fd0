// DockerApi: a small client of the Docker Engine API (pinned to v1.41, what
// Debian 12's dockerd 20.10 serves) over its unix socket, HTTP/1.1 + JSON.
// Each call opens its own connection and is bounded by a deadline; errors
// come back as Status (the daemon's message kept), never as exceptions.
// Thread-safe: calls share nothing mutable, so any number may run at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace ringmaster::agent {

class DockerApi {
 public:
  // Called for each log line, without its newline: stream 1 = stdout,
  // 2 = stderr; `ts` is Docker's RFC3339Nano timestamp of the line. Return
  // false to stop following.
  using LogSink = std::function<bool(int stream, std::string_view ts, std::string_view line)>;

  struct LogOptions {
    // Docker's `since`: "<seconds>.<9 digits>" (see FormatSince), "" = from
    // the start. Inclusive: a line stamped exactly `since` is sent again, so
    // resume after a line stamped T with FormatSince(T + 1).
    std::string since;
    // Polled every `poll` while no bytes arrive; true ends the follow (Ok).
    // This is how a caller stops following a quiet container. May be empty.
    std::function<bool()> stop_requested;
    std::chrono::milliseconds poll{1000};
  };

  // REQUIRES: socket_path names the daemon's socket, e.g. /var/run/docker.sock.
  explicit DockerApi(std::string socket_path, std::chrono::milliseconds deadline = std::chrono::seconds(30));

  const std::string& socket_path() const { return socket_path_; }

  // GET /_ping: Ok when the daemon answers.
  Status Ping() const;

  // GET /version: {"Version": "20.10.24+dfsg1", "ApiVersion": "1.41", ...}.
  StatusOr<nlohmann::json> Version() const;

  // GET /info: {"CgroupDriver": "cgroupfs" | "systemd", "CgroupVersion": "1" | "2", ...}.
  StatusOr<nlohmann::json> Info() const;

  // GET /images/{ref}/json. NotFound when the daemon has no such image.
  StatusOr<nlohmann::json> InspectImage(const std::string& ref) const;

  // `docker import`: streams the tar at `tar_path` from disk (never whole in
  // memory) as image repo:tag, applying Dockerfile `changes` ("ENV A=b",
  // "CMD [\"sh\"]"). Empty repo leaves the image untagged; empty tag means
  // "latest". NotFound when the file cannot be opened; a tar the daemon
  // cannot unpack is Internal (dockerd 20.10 answers 500), a bad name or
  // change InvalidArgument.
  Status ImportImage(const std::string& tar_path, const std::string& repo, const std::string& tag,
                     const std::vector<std::string>& changes,
                     std::chrono::milliseconds deadline = std::chrono::minutes(10)) const;

  // `docker pull` of `ref` ("host/repo@sha256:<hex>") with a registry login
  // ({"username", "password", "serveraddress"} JSON; "" = anonymous), sent
  // only as this call's X-Registry-Auth header. NotFound for a missing image;
  // the registry's refusal (401, ...) in the error otherwise.
  // `stop` (asked every 200 ms; may be empty) ends a pull with Aborted.
  Status PullImage(const std::string& ref, const std::string& auth_json, std::chrono::milliseconds timeout,
                   const std::function<bool()>& stop = {}) const;

  // POST /containers/create; `config` is the API's body (Image, Cmd, Env,
  // Labels, HostConfig, ...). Returns the container's id. Empty name lets
  // Docker choose one. AlreadyExists when the name is taken; NotFound when
  // the image is missing.
  StatusOr<std::string> CreateContainer(const std::string& name, const nlohmann::json& config) const;

  // Ok when started or already running.
  Status StartContainer(const std::string& id) const;
  // `signal`: "SIGKILL", "KILL", "15", ... FailedPrecondition when the
  // container is not running.
  Status KillContainer(const std::string& id, const std::string& signal) const;
  // SIGTERM (or the image's StopSignal), SIGKILL after `seconds`. Ok when
  // already stopped. The call's deadline grows by `seconds`.
  Status StopContainer(const std::string& id, int seconds) const;
  // Removes the container and its anonymous volumes; `force` kills it first
  // if running (else FailedPrecondition). Ok when there is no such container.
  Status RemoveContainer(const std::string& id, bool force) const;

  // GET /containers/{id}/json. NotFound when absent.
  StatusOr<nlohmann::json> InspectContainer(const std::string& id) const;

  // The exit code once the container is not running (immediately for an
  // exited or never-started one). DeadlineExceeded when it is still running
  // after `deadline`.
  StatusOr<int64_t> WaitContainer(const std::string& id, std::chrono::milliseconds deadline) const;

  // GET /containers/json. Every label must match: "k" => "v" matches k=v,
  // "k" => "" matches any value of k. `all` includes stopped containers.
  StatusOr<std::vector<nlohmann::json>> ListContainers(const std::map<std::string, std::string>& labels,
                                                       bool all) const;

  // Follows the container's stdout and stderr (with timestamps), calling
  // `sink` for each line in the daemon's order, until the stream ends (the
  // container exited and its logs are drained: Ok), `sink` returns false or
  // `stop_requested` says so (Ok), or an error. Only for containers created
  // with Tty=false (Docker's multiplexed framing); FailedPrecondition
  // otherwise. No overall deadline: a container may run for days. A daemon
  // that dies closes the socket, which ends the call with Unavailable; one
  // that hangs while alive is indistinguishable from a quiet container,
  // so callers that care bound it with `stop_requested`.
  // A line longer than 1 MiB is passed on in 1 MiB pieces; a last line
  // without newline is passed on at the end of the stream.
  Status FollowLogs(const std::string& id, const LogOptions& options, const LogSink& sink) const;

  // "2026-12-03T15:04:05.123456789Z" (any number of fraction digits, "Z" or
  // "+hh:mm") => nanoseconds since the Unix epoch. InvalidArgument otherwise.
  static StatusOr<int64_t> ParseDockerTimestamp(std::string_view ts);
  // Nanoseconds since the epoch => Docker's `since` form "1733240000.123456789".
  static std::string FormatSince(int64_t unix_nanos);

 private:
  std::string socket_path_;
  std::chrono::milliseconds deadline_;
};

// Splits Docker's multiplexed log stream (frames of [stream, 0, 0, 0,
// uint32 big-endian size] + payload, each payload "<timestamp> <text>") into
// lines. Bytes may be fed in any pieces. A line may span frames: Docker
// splits lines over 16 KiB into several frames, each with its own copy of
// the timestamp, which is dropped; the line keeps its first. Exposed for
// tests; used by DockerApi::FollowLogs. Not thread-safe (one per stream).
class DockerLogDemuxer {
 public:
  static constexpr size_t kMaxLine = 1 << 20;
  static constexpr size_t kMaxFrame = 4 << 20;  // Docker's are ~16 KiB

  explicit DockerLogDemuxer(DockerApi::LogSink sink) : sink_(std::move(sink)) {}

  // Ok while the sink wants more; Aborted once it returned false (the
  // caller's stop, not an error); FailedPrecondition for bytes that are not
  // framed as above (a Tty container's raw output); Internal for a frame
  // over kMaxFrame or the daemon's own error frame (stream 3).
  Status Feed(std::string_view bytes);
  // Passes on partial last lines. Call at the end of the stream.
  Status Finish();

 private:
  struct Partial {
    std::string ts;
    std::string text;
    bool open = false;  // a line has begun and not yet ended
  };
  Status Frame(int stream, std::string_view payload);
  bool Emit(int stream, Partial& p);

  DockerApi::LogSink sink_;
  std::string pending_;  // bytes of an incomplete frame
  Partial partial_[3];   // by stream (1, 2)
  bool stopped_ = false;
};

}  // namespace ringmaster::agent
