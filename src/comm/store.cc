#include "comm/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/auth.h"
#include "comm/store_protocol.h"
#include "common/files.h"

namespace ringmaster::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::string HexKey(const std::string& key) {
  std::string out;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.') out += static_cast<char>(c);
    else out += fmt::format("%{:02x}", c);
  }
  return out;
}

int64_t MsLeft(Clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
}

// Reads exactly n bytes before `deadline`.
Status ReadFull(int fd, void* buf, size_t n, Clock::time_point deadline, const std::string& what) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    int64_t left = MsLeft(deadline);
    if (left <= 0) return DeadlineExceeded(what + ": timed out");
    pollfd pfd{fd, POLLIN, 0};
    int r = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r < 0 && errno != EINTR) return Unavailable(what + ": " + std::strerror(errno));
    if (r <= 0) continue;
    ssize_t got = recv(fd, p, n, MSG_DONTWAIT);
    if (got == 0) return Unavailable(what + ": connection closed");
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Unavailable(what + ": " + std::strerror(errno));
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return Status::Ok();
}

// Writes all of `data` before `deadline`.
Status WriteFull(int fd, std::string_view data, Clock::time_point deadline, const std::string& what) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return Unavailable(what + ": " + std::strerror(errno));
    int64_t left = MsLeft(deadline);
    if (left <= 0) return DeadlineExceeded(what + ": timed out sending");
    pollfd pfd{fd, POLLOUT, 0};
    poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
  }
  return Status::Ok();
}

// One connection attempt that gives up at `deadline` (a host that drops
// SYNs would otherwise hold connect() for minutes).
StatusOr<int> ConnectOnce(const sockaddr_in& addr, Clock::time_point deadline) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Unavailable(std::strerror(errno));
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) {
      int e = errno;
      close(fd);
      return Unavailable(std::strerror(e));
    }
    pollfd pfd{fd, POLLOUT, 0};
    int64_t left = std::max<int64_t>(MsLeft(deadline), 1);
    int err = 0;
    socklen_t len = sizeof err;
    if (poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, INT32_MAX))) <= 0) {
      close(fd);
      return DeadlineExceeded("connection timed out");
    }
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      close(fd);
      return Unavailable(std::strerror(err));
    }
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool ParseInt(const std::string& s, int64_t* v) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

// ---------------------------------------------------------------- FileStore

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) { (void)MakeDirs(dir_, 0700); }

std::string FileStore::Path(const std::string& key) const { return dir_ + "/" + HexKey(key); }

Status FileStore::Set(const std::string& key, const std::string& value, std::chrono::milliseconds) {
  return WriteFileAtomic(Path(key), value, 0600);
}

StatusOr<std::string> FileStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (true) {
    if (std::filesystem::exists(Path(key))) return ReadFile(Path(key));
    if (Clock::now() >= deadline) {
      return DeadlineExceeded(fmt::format("store: key \"{}\" did not appear in {} ms", key, timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

StatusOr<int64_t> FileStore::Add(const std::string& key, int64_t delta, std::chrono::milliseconds) {
  std::string lock_path = dir_ + "/.lock";
  int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Internal("store: open " + lock_path + ": " + std::strerror(errno));
  flock(fd, LOCK_EX);
  int64_t v = 0;
  Status st;
  auto cur = ReadFile(Path(key));
  if (cur.ok() && !ParseInt(*cur, &v)) {
    st = FailedPrecondition(fmt::format("store: key \"{}\" does not hold an integer", key));
  } else {
    v += delta;
    st = WriteFileAtomic(Path(key), std::to_string(v), 0600);
  }
  flock(fd, LOCK_UN);
  close(fd);
  if (!st.ok()) return st;
  return v;
}

// ----------------------------------------------------------- TcpStoreServer

StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, int port,
                                                                 TcpStoreServerOptions options) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    return InvalidArgument("store: \"" + host + "\" is not an IPv4 address");
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 512) != 0) {
    int e = errno;
    close(fd);
    return Unavailable(fmt::format("store: cannot listen on {}:{}: {}", host, port, std::strerror(e)));
  }
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::unique_ptr<TcpStoreServer> s(new TcpStoreServer());
  s->options_ = std::move(options);
  s->listen_fd_ = fd;
  s->wake_fd_ = eventfd(0, EFD_CLOEXEC);
  s->port_ = ntohs(addr.sin_port);
  s->thread_ = std::thread([p = s.get()] { p->Run(); });
  return s;
}

TcpStoreServer::~TcpStoreServer() { Stop(); }

TcpStoreStats TcpStoreServer::stats() const {
  return {queued_bytes_.load(), peak_queued_bytes_.load(), budget_drops_.load(), refused_.load()};
}

void TcpStoreServer::Stop() {
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  thread_.join();
  close(listen_fd_);
  close(wake_fd_);
}

void TcpStoreServer::Run() {
  struct Client {
    std::string peer;  // "address:port", for log lines
    Clock::time_point accepted;
    std::string out;  // replies not yet sent
    size_t sent = 0;
  };
  std::map<int, Client> clients;  // by fd
  StoreCore core(options_.secret, options_.reply_budget);
  StoreCore::Output out;
  // Drops are logged, at most one line a second, so a stranger's many tries
  // cannot flood the task's log.
  Clock::time_point last_log{};
  size_t unlogged = 0;
  auto note = [&](const Client& c, const std::string& reason) {
    const auto now = Clock::now();
    if (now - last_log < std::chrono::seconds(1)) {
      ++unlogged;
      return;
    }
    last_log = now;
    fmt::print(stderr, "ringcomm store: closed the connection from {}: {}{}\n", c.peer, reason,
               unlogged ? fmt::format(" ({} more closed since the last line)", unlogged) : "");
    unlogged = 0;
  };
  auto close_client = [&](int fd, const std::string& reason) {
    auto it = clients.find(fd);
    if (it == clients.end()) return;
    if (!reason.empty()) note(it->second, reason);
    core.Drop(fd);
    close(fd);
    clients.erase(it);
  };
  auto refuse = [&](int fd, const std::string& reason) {
    ++refused_;
    close_client(fd, reason);
  };
  // Applies what the core decided: replies to queue, clients it dropped.
  auto apply = [&] {
    for (auto& r : out.replies) {
      auto it = clients.find(r.client);
      if (it != clients.end()) it->second.out += r.bytes;
    }
    for (auto& d : out.dropped) {
      if (!d.authenticated) ++refused_;
      auto it = clients.find(d.client);
      if (it == clients.end()) continue;
      note(it->second, d.reason);
      close(d.client);
      clients.erase(it);
    }
    out = {};
    queued_bytes_ = core.queued_bytes();
    peak_queued_bytes_ = std::max(peak_queued_bytes_.load(), core.queued_bytes());
    budget_drops_ = core.budget_drops();
  };
  const bool open = options_.secret.empty();
  while (true) {
    std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    size_t unauthenticated = 0;
    for (auto& [fd, c] : clients) {
      const bool writing = c.out.size() > c.sent;
      fds.push_back({fd, static_cast<short>((core.wants_input(fd) ? POLLIN : 0) | (writing ? POLLOUT : 0)), 0});
      unauthenticated += !open && !core.authenticated(fd);
    }
    // Strangers' deadlines are checked at least every 100 ms.
    if (poll(fds.data(), fds.size(), unauthenticated ? 100 : -1) < 0 && errno != EINTR) return;
    if (fds[1].revents) break;
    for (size_t i = 2; i < fds.size(); ++i) {
      const int fd = fds[i].fd;
      if (!clients.count(fd) || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        if (!open && !core.authenticated(fd)) ++refused_;
        close_client(fd, "");
      } else if (n > 0) {
        core.Feed(fd, std::string_view(buf, static_cast<size_t>(n)), &out);
        apply();
      }
    }
    for (auto& [fd, c] : clients) {
      while (c.sent < c.out.size()) {
        ssize_t n = send(fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          c.sent += static_cast<size_t>(n);
          core.Sent(fd, static_cast<size_t>(n), &out);
          continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR) out.dropped.push_back({fd, "", core.authenticated(fd)});
        break;
      }
      if (c.sent == c.out.size()) {
        c.out.clear();
        c.sent = 0;
      } else if (c.sent > (1 << 20)) {
        c.out.erase(0, c.sent);
        c.sent = 0;
      }
    }
    for (auto& d : out.dropped) core.Drop(d.client);  // a send failed: the core may still hold it
    apply();
    const auto now = Clock::now();
    std::vector<int> late;
    for (const auto& [fd, c] : clients) {
      if (!open && !core.authenticated(fd) && now - c.accepted >= options_.auth_timeout) late.push_back(fd);
    }
    for (int fd : late) refuse(fd, "did not prove the job's secret in time");
    if (fds[0].revents & POLLIN) {
      sockaddr_in peer{};
      socklen_t len = sizeof peer;
      int c = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c >= 0 && clients.size() >= kMaxClients) {
        close(c);  // full: turn it away rather than run out of descriptors
      } else if (c >= 0) {
        if (!open && unauthenticated >= kMaxUnauthenticated) {
          // Strangers may not crowd out a rank: the oldest of them goes.
          int oldest = -1;
          for (const auto& [fd, cl] : clients) {
            if (!core.authenticated(fd) && (oldest < 0 || cl.accepted < clients.at(oldest).accepted)) oldest = fd;
          }
          if (oldest >= 0) refuse(oldest, "too many connections have not proven the job's secret");
        }
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        char ip[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
        clients[c] = Client{fmt::format("{}:{}", ip, ntohs(peer.sin_port)), now, "", 0};
        core.Accept(c, NewNonce(), &out);
        apply();
      }
    }
  }
  for (auto& [fd, c] : clients) close(fd);
}

// ----------------------------------------------------------------- TcpStore

StatusOr<std::unique_ptr<TcpStore>> TcpStore::Connect(const std::string& host, int port,
                                                      std::chrono::milliseconds timeout, std::string secret) {
  auto deadline = Clock::now() + timeout;
  sockaddr_in addr{};
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return InvalidArgument("store: \"" + host + "\" is not an IPv4 address");
  }
  std::unique_ptr<TcpStore> store(new TcpStore(-1, host, port, std::move(secret)));
  std::string last = "timed out";
  while (Clock::now() < deadline) {
    auto fd = store->Open(deadline);
    if (fd.ok()) {
      store->fd_ = *fd;
      return store;
    }
    // A store that refused the proof, or could not give its own, will not change its mind.
    if (fd.status().code() == StatusCode::kUnauthenticated) return fd.status();
    last = fd.status().message();
    std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp<int64_t>(MsLeft(deadline), 0, 20)));
  }
  return DeadlineExceeded(fmt::format("store: cannot reach {}:{} in {} ms: {}", host, port, timeout.count(), last));
}

StatusOr<int> TcpStore::Open(Clock::time_point deadline) const {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  inet_pton(AF_INET, host_.c_str(), &addr.sin_addr);
  RM_ASSIGN_OR_RETURN(int fd, ConnectOnce(addr, deadline));
  if (secret_.empty()) return fd;
  const std::string what = fmt::format("store {}:{}", host_, port_);
  auto fail = [&](Status st) {
    close(fd);
    return st;
  };
  std::string challenge(kStoreChallengeBytes, '\0');
  if (Status st = ReadFull(fd, challenge.data(), challenge.size(), deadline, what); !st.ok()) {
    return fail(st.code() == StatusCode::kDeadlineExceeded
                    ? Unauthenticated(what + ": sent no authentication challenge: a store without the job's secret?")
                    : st);
  }
  if (std::string_view(challenge).substr(0, 4) != kStoreChallengeMagic) {
    return fail(Unauthenticated(what + ": sent no authentication challenge: not a ringcomm store of this job"));
  }
  const std::string nonce = NewNonce();
  if (Status st = WriteFull(fd, EncodeStoreAuth(secret_, challenge, nonce), deadline, what); !st.ok()) return fail(st);
  std::string proof(kStoreProofBytes, '\0');
  if (Status st = ReadFull(fd, proof.data(), proof.size(), deadline, what); !st.ok()) {
    return fail(Unauthenticated(fmt::format(
        "{}: refused this process's proof of the job's secret (is RINGMASTER_JOB_SECRET this job's?): {}", what,
        st.message())));
  }
  if (!CheckStoreServerProof(secret_, challenge, nonce, proof)) {
    return fail(Unauthenticated(what + ": could not prove it holds the job's secret: not this job's store"));
  }
  return fd;
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) close(fd_);
}

StatusOr<std::string> TcpStore::Call(uint8_t op, const std::string& key, const std::string& value,
                                     std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> l(mu_);
  const auto deadline = Clock::now() + timeout;
  const std::string what = fmt::format("store {}:{} key \"{}\"", host_, port_, key);
  if (key.size() > kMaxStoreKeyBytes || value.size() > kMaxStoreValueBytes) {
    return InvalidArgument(fmt::format("{}: key or value too large", what));
  }
  if (fd_ < 0) {
    auto fd = Open(deadline);
    if (!fd.ok()) return Unavailable(fmt::format("{}: cannot reconnect: {}", what, fd.status().message()));
    fd_ = *fd;
  }
  auto fail = [&](Status st) {
    // The server may still owe a reply on this connection: it is out of step.
    close(fd_);
    fd_ = -1;
    if (st.code() == StatusCode::kDeadlineExceeded && op == kStoreGet) {
      return DeadlineExceeded(fmt::format("store: key \"{}\" did not appear in {} ms", key, timeout.count()));
    }
    return st;
  };
  if (Status st = WriteFull(fd_, EncodeStoreRequest(op, key, value), deadline, what); !st.ok()) return fail(st);
  uint8_t status;
  uint64_t n;
  if (Status st = ReadFull(fd_, &status, 1, deadline, what); !st.ok()) return fail(st);
  if (Status st = ReadFull(fd_, &n, 8, deadline, what); !st.ok()) return fail(st);
  if (status == static_cast<uint8_t>(kStoreChallengeMagic[0]) && secret_.empty()) {
    return fail(Unauthenticated(
        fmt::format("{}: the store asks for the job's secret, and RINGMASTER_JOB_SECRET is not set here", what)));
  }
  if (n > kMaxStoreValueBytes || (status != kStoreOk && status != kStoreError)) {
    return fail(Unavailable(fmt::format("{}: malformed reply (status {}, {} bytes): not a ringcomm store?", what, status, n)));
  }
  std::string out(n, '\0');
  if (Status st = ReadFull(fd_, out.data(), n, deadline, what); !st.ok()) return fail(st);
  if (status == kStoreError) return FailedPrecondition(fmt::format("{}: {}", what, out));
  return out;
}

Status TcpStore::Set(const std::string& key, const std::string& value, std::chrono::milliseconds timeout) {
  return Call(kStoreSet, key, value, timeout).status();
}

StatusOr<std::string> TcpStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  return Call(kStoreGet, key, "", timeout);
}

StatusOr<int64_t> TcpStore::Add(const std::string& key, int64_t delta, std::chrono::milliseconds timeout) {
  RM_ASSIGN_OR_RETURN(std::string v, Call(kStoreAdd, key, std::to_string(delta), timeout));
  int64_t n = 0;
  if (!ParseInt(v, &n)) return Unavailable(fmt::format("store: add \"{}\": the reply is not an integer", key));
  return n;
}

}  // namespace ringmaster::comm
