// The HTTP/1.1 client (Beast) of every component that speaks HTTP out: the
// S3 store, the Docker API (unix socket) and the REST API client. Every
// network wait (connect, write, read) has a deadline; errors are Status and
// name the peer and what timed out. Client is thread-safe; a ResponseStream
// belongs to one thread and must not outlive its Client.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ringmaster::http {

// Where a Client connects.
struct ClientTarget {
  enum class Transport { kTcp, kTls, kUnix };
  Transport transport = Transport::kTcp;
  std::string host;         // tcp, tls: a name or address (IPv6 without brackets)
  std::string port;         // tcp, tls
  std::string socket_path;  // unix
  std::string host_header;  // "" = host:port (tcp, tls) or "localhost" (unix)
  std::string ca_file;      // tls: PEM CAs to trust ("" = the system's)
  // "http://host:port", "https://host:port" or the socket's path.
  std::string Describe() const;
};

// "http://host[:port]", "https://host[:port]" (a path after the authority is
// refused) or "unix:/path/to.sock".
StatusOr<ClientTarget> ParseClientUrl(std::string_view url);

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{5'000};
  std::chrono::milliseconds io_timeout{30'000};  // each write or read wait
  // Idle keep-alive connections kept for reuse; 0 = one request per
  // connection ("Connection: close").
  size_t max_idle = 0;
  // Acknowledge each read at once (TCP_QUICKACK): a server that sends head
  // and body in two segments otherwise waits for our delayed ACK.
  bool quick_ack = false;
  // Error messages read "<prefix>cannot reach <peer>: ..." and
  // "<prefix><what>: ...". peer "" = the target's Describe().
  std::string prefix;
  std::string peer;
  // Appended to the error for a TLS certificate this client does not trust.
  std::string untrusted_hint;
};

struct ClientRequest {
  std::string method = "GET";
  std::string target = "/";  // path and query, already encoded
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // A body streamed instead of `body`: `body_size` bytes that `body_source`
  // puts in buf (how many; 0 or an error ends the call), sent as they come.
  uint64_t body_size = 0;
  std::function<StatusOr<size_t>(char* buf, size_t n)> body_source;
};

struct CallOptions {
  std::string what;  // names the call in errors ("" = "METHOD target")
  std::optional<std::chrono::milliseconds> io_timeout;           // this call's, instead of the client's
  std::optional<std::chrono::steady_clock::time_point> deadline;  // for the whole call, connect included
  // While waiting, every `poll` ask `stop`; true ends the call with Aborted.
  std::chrono::milliseconds poll{0};
  std::function<bool()> stop;
  uint64_t max_body = 16 << 20;  // Do(): a longer answer is Internal
};

struct ClientResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // Do() only
  std::optional<uint64_t> content_length;
  // Set when the server answered before taking the whole streamed body
  // (the write's failure); the answer usually says why.
  Status send_error;

  // The first header of that name (any case); "" when absent.
  std::string Header(std::string_view name) const;
};

class Connection;
class ResponseStream;

class Client {
 public:
  Client(ClientTarget target, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One request, the answer read whole. A request without a streamed body
  // that fails on a reused keep-alive connection (the server closed it) is
  // sent once more on a fresh one.
  StatusOr<ClientResponse> Do(const ClientRequest& request, const CallOptions& options = {});
  // Sends the request and reads the answer's head; its body is then read
  // from the stream (status and headers in head()).
  StatusOr<std::unique_ptr<ResponseStream>> Open(const ClientRequest& request, const CallOptions& options = {});

  // Aborts the calls in flight (from any thread) and fails later ones with Aborted.
  void Cancel();

  const ClientTarget& target() const { return target_; }

 private:
  friend class ResponseStream;
  struct Tls;
  StatusOr<std::unique_ptr<Connection>> Acquire(const CallOptions& options, bool* reused);
  void Release(std::unique_ptr<Connection> conn);
  StatusOr<std::unique_ptr<ResponseStream>> Start(const ClientRequest& request, const CallOptions& options);
  void Register(Connection* c);
  void Unregister(Connection* c);

  ClientTarget target_;
  ClientOptions options_;
  std::unique_ptr<Tls> tls_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_;  // GUARDED_BY(mu_)
  std::set<Connection*> active_;                   // GUARDED_BY(mu_)
  bool cancelled_ = false;                         // GUARDED_BY(mu_)
};

// The body of one answer, read as it arrives. Destroying it before the end
// closes the connection; after the end a keep-alive one goes back to the pool.
class ResponseStream {
 public:
  ~ResponseStream();
  const ClientResponse& head() const { return head_; }
  // Up to n bytes, as soon as some arrive; 0 at the end of the body.
  StatusOr<size_t> ReadSome(char* buf, size_t n);
  // The rest of the body; Internal past `limit` bytes.
  StatusOr<std::string> ReadAll(uint64_t limit);
  bool done() const;

 private:
  friend class Client;
  ResponseStream(Client* client, std::unique_ptr<Connection> conn, CallOptions options, ClientResponse head);

  Client* client_;
  std::unique_ptr<Connection> conn_;
  CallOptions options_;
  ClientResponse head_;
};

}  // namespace ringmaster::http
