#include "http/client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

namespace ringmaster::http {
namespace {

using namespace std::chrono_literals;

// A scripted peer: accepts connections on loopback (or a unix socket) and
// hands each to `serve`, one at a time.
class Peer {
 public:
  using Serve = std::function<void(int fd)>;
  explicit Peer(Serve serve, std::string unix_path = "") : serve_(std::move(serve)) {
    if (unix_path.empty()) {
      fd_ = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
      socklen_t len = sizeof a;
      getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
      port_ = ntohs(a.sin_port);
    } else {
      fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::snprintf(a.sun_path, sizeof a.sun_path, "%s", unix_path.c_str());
      bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    listen(fd_, 8);
    thread_ = std::thread([this] {
      for (;;) {
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        ++accepted_;
        serve_(c);
        close(c);
      }
    });
  }
  ~Peer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  ClientTarget Target() const {
    ClientTarget t;
    t.host = "127.0.0.1";
    t.port = std::to_string(port_);
    return t;
  }
  int accepted() const { return accepted_; }

 private:
  Serve serve_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

// Reads one request head; its Content-Length body's size in *body_bytes.
bool ReadRequest(int fd, uint64_t* body_bytes = nullptr) {
  std::string got;
  char c;
  while (got.find("\r\n\r\n") == std::string::npos) {
    if (read(fd, &c, 1) != 1) return false;
    got.push_back(c);
  }
  uint64_t length = 0;
  if (size_t at = got.find("Content-Length: "); at != std::string::npos) length = std::stoull(got.substr(at + 16));
  char buf[65536];
  for (uint64_t left = length; left > 0;) {
    ssize_t n = read(fd, buf, std::min<uint64_t>(left, sizeof buf));
    if (n <= 0) return false;
    left -= static_cast<uint64_t>(n);
  }
  if (body_bytes) *body_bytes = length;
  return true;
}

void Send(int fd, const std::string& s) { (void)!write(fd, s.data(), s.size()); }

TEST(HttpClient, ReadsAChunkedAnswer) {
  Peer peer([](int fd) {
    ReadRequest(fd);
    Send(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Thing: yes\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  });
  Client client(peer.Target());
  auto r = client.Do({.target = "/x"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello world");
  EXPECT_EQ(r->Header("x-thing"), "yes");
}

TEST(HttpClient, ASilentPeerIsDeadlineExceededNamingWhatTimedOut) {
  Peer peer([](int fd) {
    ReadRequest(fd);
    std::this_thread::sleep_for(1s);
  });
  Client client(peer.Target(), {.io_timeout = 100ms, .prefix = "s3: "});
  auto r = client.Do({.target = "/slow"});
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_NE(r.status().message().find("s3: read the answer to GET /slow: no answer in 100 ms"), std::string::npos) << r.status().ToString();
}

TEST(HttpClient, NobodyListeningNamesThePeer) {
  ClientTarget t;
  t.host = "127.0.0.1";
  t.port = "1";
  Client client(t);
  auto r = client.Do({});
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("cannot reach http://127.0.0.1:1"), std::string::npos) << r.status().ToString();
}

TEST(HttpClient, KeepAliveReusesTheConnection) {
  Peer peer([](int fd) {
    while (ReadRequest(fd)) Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  });
  Client client(peer.Target(), {.max_idle = 4});
  for (int i = 0; i < 3; ++i) {
    auto r = client.Do({.target = "/k"});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->body, "ok");
  }
  EXPECT_EQ(peer.accepted(), 1);
}

TEST(HttpClient, StreamsAnUploadAndADownload) {
  constexpr uint64_t kSize = 5 << 20;
  Peer peer([](int fd) {
    uint64_t got = 0;
    ReadRequest(fd, &got);
    std::string body(got, 'z');
    Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(got) + "\r\n\r\n" + body);
  });
  Client client(peer.Target());
  uint64_t offered = 0;
  ClientRequest req{.method = "PUT", .target = "/up", .body_size = kSize};
  req.body_source = [&](char* buf, size_t n) -> StatusOr<size_t> {
    std::fill(buf, buf + n, 'a');
    offered += n;
    return n;
  };
  auto stream = client.Open(req);
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  EXPECT_EQ(offered, kSize);
  EXPECT_EQ((*stream)->head().content_length, kSize);
  uint64_t read_back = 0;
  char buf[70000];
  for (;;) {
    auto n = (*stream)->ReadSome(buf, sizeof buf);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    if (*n == 0) break;
    read_back += *n;
  }
  EXPECT_EQ(read_back, kSize);
}

TEST(HttpClient, RefusesAnAnswerOverTheLimit) {
  Peer peer([](int fd) {
    ReadRequest(fd);
    Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n{}");
  });
  Client client(peer.Target());
  auto r = client.Do({}, {.max_body = 1000});
  EXPECT_EQ(r.status().code(), StatusCode::kInternal) << r.status().ToString();
}

TEST(HttpClient, AHeadAnswerHasNoBodyWhateverItsLength) {
  Peer peer([](int fd) {
    ReadRequest(fd);
    Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n");
  });
  Client client(peer.Target());
  auto r = client.Do({.method = "HEAD"}, {.max_body = 1000});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->content_length, 100000000u);
  EXPECT_EQ(r->body, "");
}

TEST(HttpClient, SpeaksOverAUnixSocket) {
  const std::string path = (std::filesystem::temp_directory_path() / ("rm_client_test." + std::to_string(getpid()))).string();
  unlink(path.c_str());
  {
    Peer peer(
        [](int fd) {
          ReadRequest(fd);
          Send(fd, "HTTP/1.1 204 No Content\r\n\r\n");
        },
        path);
    ClientTarget t;
    t.transport = ClientTarget::Transport::kUnix;
    t.socket_path = path;
    Client client(t);
    auto r = client.Do({.method = "POST", .target = "/v1/x"});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 204);
  }
  unlink(path.c_str());
}

TEST(HttpClient, CancelEndsAWaitFromAnotherThread) {
  Peer peer([](int fd) {
    ReadRequest(fd);
    std::this_thread::sleep_for(2s);
  });
  Client client(peer.Target(), {.io_timeout = 60s});
  std::thread canceller([&] {
    std::this_thread::sleep_for(200ms);
    client.Cancel();
  });
  const auto start = std::chrono::steady_clock::now();
  auto r = client.Do({});
  canceller.join();
  EXPECT_EQ(r.status().code(), StatusCode::kAborted) << r.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms);
  EXPECT_EQ(client.Do({}).status().code(), StatusCode::kAborted);
}

TEST(HttpClient, ParsesUrls) {
  auto t = ParseClientUrl("https://[::1]:8443");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->transport, ClientTarget::Transport::kTls);
  EXPECT_EQ(t->host, "::1");
  EXPECT_EQ(t->port, "8443");
  EXPECT_EQ(t->Describe(), "https://[::1]:8443");
  EXPECT_EQ(ParseClientUrl("http://h")->port, "80");
  EXPECT_EQ(ParseClientUrl("unix:/run/d.sock")->socket_path, "/run/d.sock");
  EXPECT_FALSE(ParseClientUrl("ftp://h").ok());
  EXPECT_FALSE(ParseClientUrl("http://h/path").ok());
}

}  // namespace
}  // namespace ringmaster::http
