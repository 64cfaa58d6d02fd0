// The agent's lab tunnel: the notebook socket is reached only as the task's
// own (no symlink, no other owner), a notebook that stops reading cannot pin
// a tunnel, and silent connections cannot crowd out a ticketed one.
#include "agent/lab_tunnel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "protocol/lab_tunnel.h"

namespace ringmaster::agent {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr uid_t kOtherUid = 4242;
const std::string kLabDir = std::string("/work") + "/.lab";  // in a sandbox
const std::string kKey(64, 'a');

// A listening unix socket at `path`; echoes (or, with `read` false, accepts
// and never reads) on a thread of its own until destroyed.
class Notebook {
 public:
  Notebook(const std::string& path, bool read) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0) << path;
    EXPECT_EQ(listen(fd_, 16), 0);
    thread_ = std::thread([this, read] {
      while (true) {
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        {
          std::lock_guard<std::mutex> l(mu_);
          accepted_.push_back(c);
        }
        if (!read) continue;
        char buf[4096];
        ssize_t n;
        while ((n = recv(c, buf, sizeof buf, 0)) > 0) send(c, buf, static_cast<size_t>(n), MSG_NOSIGNAL);
      }
    });
  }
  ~Notebook() {
    shutdown(fd_, SHUT_RDWR);
    {
      std::lock_guard<std::mutex> l(mu_);
      for (int c : accepted_) shutdown(c, SHUT_RDWR);
    }
    thread_.join();
    close(fd_);
    for (int c : accepted_) close(c);
  }

 private:
  int fd_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::vector<int> accepted_;  // GUARDED_BY(mu_)
};

class LabTunnelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/labtunnel-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    box_ = root_ + "/box";
    lab_ = box_ + kLabDir;
    fs::create_directories(lab_);
    uid_ = geteuid();
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string Socket() const { return lab_ + "/notebook.sock"; }
  bool Root() const { return geteuid() == 0; }

  std::unique_ptr<LabTunnel> StartTunnel(LabTunnel::Limits limits = {}) {
    auto t = std::make_unique<LabTunnel>(
        [this](int64_t task_id, int64_t attempt) -> StatusOr<UniqueFd> {
          if (task_id != 7 || attempt != 1) return NotFound("no such task");
          return OpenNotebookSocket(box_, uid_);
        },
        RealClock::Get(), limits);
    EXPECT_TRUE(t->Start(0).ok());
    t->SetKey(kKey);
    return t;
  }

  // A TCP connection to the tunnel from `from` (any 127.0.0.0/8 address).
  static int Dial(int port, const char* from = "127.0.0.1") {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, from, &a.sin_addr);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    a.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
  }

  static std::string Greeting() {
    protocol::TunnelTicket t{7, 1, RealClock::Get()->NowMs() + protocol::kTunnelTicketTtlMs};
    return std::string(protocol::kTunnelGreeting) + protocol::SignTunnelTicket(t, kKey) + "\n";
  }

  // Reads until `want` appears, the peer closes, or `ms` pass.
  static std::string ReadUntil(int fd, const std::string& want, int ms = 5000) {
    std::string out;
    char buf[4096];
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(ms);
    while (out.find(want) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

  // True once the peer closed (EOF or reset) within `ms`, having sent nothing.
  static bool ClosedWithin(int fd, int ms) {
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(ms);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char c;
      return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
    }
    return false;
  }

  // Greets, sends `payload`, and returns what comes back (until it echoes or the tunnel closes).
  // `late`: waits that long after connecting before greeting, so the tunnel
  // has accepted the connection before it says anything.
  std::string RoundTrip(int port, const std::string& payload, const char* from = "127.0.0.1",
                        milliseconds late = milliseconds(0)) {
    int fd = Dial(port, from);
    if (late.count() > 0) std::this_thread::sleep_for(late);
    const std::string out = Greeting() + payload;
    EXPECT_EQ(send(fd, out.data(), out.size(), MSG_NOSIGNAL), static_cast<ssize_t>(out.size()));
    std::string got = ReadUntil(fd, payload);
    close(fd);
    return got;
  }

  // Greets, then sends 64 MiB from a thread of its own, whose sends block
  // once every buffer on the way is full; it returns once the tunnel closes.
  static std::thread Flood(int fd) {
    return std::thread([fd] {
      const std::string greeting = Greeting();
      if (send(fd, greeting.data(), greeting.size(), MSG_NOSIGNAL) <= 0) return;
      std::string chunk(1 << 20, 'x');
      for (int i = 0; i < 64; ++i) {
        if (send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) <= 0) return;
      }
    });
  }

  std::string root_, box_, lab_;
  uid_t uid_ = 0;
};

TEST_F(LabTunnelTest, TheTasksOwnSocketIsReached) {
  Notebook nb(Socket(), true);
  auto t = StartTunnel();
  EXPECT_EQ(RoundTrip(t->port(), "GET / HTTP/1.1\r\n\r\n"), "GET / HTTP/1.1\r\n\r\n");
}

TEST_F(LabTunnelTest, ASymlinkedSocketIsRefused) {
  // Another user's notebook (say), and the task's link to it.
  fs::create_directories(root_ + "/other");
  Notebook other(root_ + "/other/notebook.sock", true);
  if (Root()) {
    ASSERT_EQ(chown((root_ + "/other/notebook.sock").c_str(), kOtherUid, kOtherUid), 0);
  }
  fs::create_symlink(root_ + "/other/notebook.sock", Socket());
  auto st = OpenNotebookSocket(box_, uid_);
  EXPECT_EQ(st.status().code(), StatusCode::kPermissionDenied) << st.status().ToString();
  auto t = StartTunnel();
  const std::string got = RoundTrip(t->port(), "secret");
  EXPECT_NE(got.find("502"), std::string::npos) << got;
  EXPECT_EQ(got.find("secret"), std::string::npos) << got;
}

TEST_F(LabTunnelTest, SymlinkedDirectoriesAreRefused) {
  fs::create_directories(root_ + "/other" + kLabDir);
  Notebook other(root_ + "/other" + kLabDir + "/notebook.sock", true);
  fs::remove_all(lab_);
  fs::create_directory_symlink(root_ + "/other" + kLabDir, lab_);
  EXPECT_EQ(OpenNotebookSocket(box_, uid_).status().code(), StatusCode::kPermissionDenied);
  fs::remove_all(box_ + "/work");
  fs::create_directory_symlink(root_ + "/other/work", box_ + "/work");
  EXPECT_EQ(OpenNotebookSocket(box_, uid_).status().code(), StatusCode::kPermissionDenied);
}

TEST_F(LabTunnelTest, ASocketOfAnotherOwnerOrKindIsRefused) {
  {
    std::ofstream(Socket()) << "not a socket";
    auto st = OpenNotebookSocket(box_, uid_);
    EXPECT_EQ(st.status().code(), StatusCode::kPermissionDenied);
    EXPECT_NE(st.status().message().find("not a socket"), std::string::npos) << st.status().ToString();
    fs::remove(Socket());
  }
  EXPECT_EQ(OpenNotebookSocket(box_, uid_).status().code(), StatusCode::kNotFound);
  if (!Root()) GTEST_SKIP() << "giving a socket to another uid needs root";
  Notebook nb(Socket(), true);
  ASSERT_TRUE(OpenNotebookSocket(box_, uid_).ok());
  ASSERT_EQ(chown(Socket().c_str(), kOtherUid, kOtherUid), 0);
  auto st = OpenNotebookSocket(box_, uid_);
  EXPECT_EQ(st.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(st.status().message().find("uid 4242"), std::string::npos) << st.status().ToString();
  // The directories, too, must be the task's.
  ASSERT_EQ(chown(Socket().c_str(), uid_, uid_), 0);
  ASSERT_EQ(chown(lab_.c_str(), kOtherUid, kOtherUid), 0);
  EXPECT_EQ(OpenNotebookSocket(box_, uid_).status().code(), StatusCode::kPermissionDenied);
}

TEST_F(LabTunnelTest, ANotebookThatNeverReadsCannotPinTheTunnel) {
  Notebook nb(Socket(), false);
  LabTunnel::Limits limits;
  limits.idle = milliseconds(300);
  auto t = StartTunnel(limits);
  int fd = Dial(t->port());
  std::thread writer = Flood(fd);
  const auto start = std::chrono::steady_clock::now();
  ReadUntil(fd, "\x01never", 10000);  // returns once the tunnel closes the connection
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(5));
  shutdown(fd, SHUT_RDWR);
  writer.join();
  close(fd);
  const auto stop = std::chrono::steady_clock::now();
  t->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - stop, std::chrono::seconds(2));
}

TEST_F(LabTunnelTest, StopEndsATunnelBlockedOnItsNotebook) {
  Notebook nb(Socket(), false);
  auto t = StartTunnel();  // the default idle: minutes
  int fd = Dial(t->port());
  std::thread writer = Flood(fd);
  std::this_thread::sleep_for(milliseconds(500));  // the tunnel's send to the notebook blocks by now
  const auto stop = std::chrono::steady_clock::now();
  t->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - stop, std::chrono::seconds(2));
  shutdown(fd, SHUT_RDWR);
  writer.join();
  close(fd);
}

TEST_F(LabTunnelTest, SilentConnectionsDoNotCrowdOutATicketedOne) {
  Notebook nb(Socket(), true);
  auto t = StartTunnel();
  std::vector<int> silent;
  for (int i = 0; i < 200; ++i) silent.push_back(Dial(t->port()));
  // Also some from other addresses, so that the total is what limits them.
  for (int i = 0; i < 40; ++i) silent.push_back(Dial(t->port(), fmt::format("127.0.1.{}", i + 1).c_str()));
  std::this_thread::sleep_for(milliseconds(100));
  // Every slot is taken by now; a greeting that comes after the accept still gets its turn.
  EXPECT_EQ(RoundTrip(t->port(), "hello", "127.0.0.2", milliseconds(200)), "hello");
  EXPECT_EQ(RoundTrip(t->port(), "again", "127.0.0.1", milliseconds(200)), "again");
  // Every silent one is closed: over the limits at once, the rest at the greeting deadline.
  int closed = 0;
  for (int fd : silent) {
    if (ClosedWithin(fd, 5000)) ++closed;
  }
  EXPECT_EQ(closed, static_cast<int>(silent.size()));
  for (int fd : silent) close(fd);
}

TEST_F(LabTunnelTest, ABadOrMissingTicketIsRefused) {
  Notebook nb(Socket(), true);
  auto t = StartTunnel();
  int fd = Dial(t->port());
  const std::string bad = std::string(protocol::kTunnelGreeting) + "v1.7.1.99999999999999.00\nsecret";
  send(fd, bad.data(), bad.size(), MSG_NOSIGNAL);
  std::string got = ReadUntil(fd, "\x01never");
  EXPECT_NE(got.find("refused the tunnel ticket"), std::string::npos) << got;
  close(fd);
}

}  // namespace
}  // namespace ringmaster::agent
