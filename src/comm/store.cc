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
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/files.h"

namespace ringmaster::comm {
namespace {

using Clock = std::chrono::steady_clock;

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3 };
enum Reply : uint8_t { kOk = 0, kError = 1 };

std::string HexKey(const std::string& key) {
  std::string out;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.') out += static_cast<char>(c);
    else out += fmt::format("%{:02x}", c);
  }
  return out;
}

// Frames: u8 op | u32 key length | key | u64 value length | value.
std::string Frame(uint8_t op, const std::string& key, const std::string& value) {
  std::string f(1 + 4 + key.size() + 8 + value.size(), '\0');
  f[0] = static_cast<char>(op);
  uint32_t kl = static_cast<uint32_t>(key.size());
  uint64_t vl = value.size();
  std::memcpy(&f[1], &kl, 4);
  std::memcpy(&f[5], key.data(), key.size());
  std::memcpy(&f[5 + key.size()], &vl, 8);
  std::memcpy(&f[13 + key.size()], value.data(), value.size());
  return f;
}

// Reads exactly n bytes before `deadline`.
Status ReadFull(int fd, void* buf, size_t n, Clock::time_point deadline, const std::string& what) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return DeadlineExceeded(what + ": timed out");
    pollfd pfd{fd, POLLIN, 0};
    int r = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r < 0 && errno != EINTR) return Unavailable(what + ": " + std::strerror(errno));
    if (r <= 0) continue;
    ssize_t got = read(fd, p, n);
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

Status WriteFull(int fd, const std::string& data, const std::string& what) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd pfd{fd, POLLOUT, 0};
        poll(&pfd, 1, 1000);
        continue;
      }
      return Unavailable(what + ": " + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------- FileStore

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) { (void)MakeDirs(dir_, 0700); }

std::string FileStore::Path(const std::string& key) const { return dir_ + "/" + HexKey(key); }

Status FileStore::Set(const std::string& key, const std::string& value) {
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

StatusOr<int64_t> FileStore::Add(const std::string& key, int64_t delta) {
  std::string lock_path = dir_ + "/.lock";
  int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Internal("store: open " + lock_path + ": " + std::strerror(errno));
  flock(fd, LOCK_EX);
  int64_t v = 0;
  auto cur = ReadFile(Path(key));
  if (cur.ok()) v = std::stoll(*cur);
  v += delta;
  Status st = WriteFileAtomic(Path(key), std::to_string(v), 0600);
  flock(fd, LOCK_UN);
  close(fd);
  if (!st.ok()) return st;
  return v;
}

// ----------------------------------------------------------- TcpStoreServer

StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, int port) {
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
  s->listen_fd_ = fd;
  s->wake_fd_ = eventfd(0, EFD_CLOEXEC);
  s->port_ = ntohs(addr.sin_port);
  s->thread_ = std::thread([p = s.get()] { p->Run(); });
  return s;
}

TcpStoreServer::~TcpStoreServer() { Stop(); }

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
    int fd;
    std::string in;
  };
  std::vector<Client> clients;
  std::map<std::string, std::string> data;
  std::map<std::string, std::vector<int>> waiting;  // key -> fds blocked in Get
  auto reply = [](int fd, const std::string& v) {
    std::string r(9 + v.size(), '\0');
    r[0] = static_cast<char>(kOk);
    uint64_t n = v.size();
    std::memcpy(&r[1], &n, 8);
    std::memcpy(&r[9], v.data(), v.size());
    (void)WriteFull(fd, r, "store reply");
  };
  while (true) {
    std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    for (auto& c : clients) fds.push_back({c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[1].revents) return;
    if (fds[0].revents & POLLIN) {
      int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        clients.push_back({c, ""});
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      Client& c = clients[i - 2];
      char buf[65536];
      ssize_t n = read(c.fd, buf, sizeof buf);
      if (n <= 0) {
        close(c.fd);
        c.fd = -1;
        continue;
      }
      c.in.append(buf, static_cast<size_t>(n));
      // Serve every complete request in the buffer.
      while (c.in.size() >= 13) {
        uint32_t kl;
        std::memcpy(&kl, &c.in[1], 4);
        if (c.in.size() < 13 + kl) break;
        uint64_t vl;
        std::memcpy(&vl, &c.in[5 + kl], 8);
        if (c.in.size() < 13 + kl + vl) break;
        uint8_t op = static_cast<uint8_t>(c.in[0]);
        std::string key = c.in.substr(5, kl), value = c.in.substr(13 + kl, vl);
        c.in.erase(0, 13 + kl + vl);
        if (op == kSet) {
          data[key] = value;
          reply(c.fd, "");
          for (int w : waiting[key]) reply(w, value);
          waiting.erase(key);
        } else if (op == kGet) {
          auto it = data.find(key);
          if (it != data.end()) reply(c.fd, it->second);
          else waiting[key].push_back(c.fd);
        } else if (op == kAdd) {
          int64_t v = 0;
          if (data.count(key)) v = std::stoll(data[key]);
          v += std::stoll(value);
          data[key] = std::to_string(v);
          reply(c.fd, data[key]);
          for (int w : waiting[key]) reply(w, data[key]);
          waiting.erase(key);
        }
      }
    }
    std::erase_if(clients, [&](const Client& c) {
      if (c.fd >= 0) return false;
      return true;
    });
    for (auto& [k, fds_waiting] : waiting) {
      std::erase_if(fds_waiting, [&](int fd) {
        return std::none_of(clients.begin(), clients.end(), [&](const Client& c) { return c.fd == fd; });
      });
    }
  }
}

// ----------------------------------------------------------------- TcpStore

StatusOr<std::unique_ptr<TcpStore>> TcpStore::Connect(const std::string& host, int port,
                                                      std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  std::string where = fmt::format("{}:{}", host, port);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return InvalidArgument("store: \"" + host + "\" is not an IPv4 address");
  }
  std::string last;
  while (Clock::now() < deadline) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return std::unique_ptr<TcpStore>(new TcpStore(fd, host, port));
    }
    last = std::strerror(errno);
    close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return DeadlineExceeded(fmt::format("store: cannot reach {} in {} ms: {}", where, timeout.count(), last));
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) close(fd_);
}

int TcpStore::Release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

StatusOr<std::string> TcpStore::Call(uint8_t op, const std::string& key, const std::string& value,
                                     std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> l(mu_);
  std::string what = fmt::format("store {}:{} key \"{}\"", host_, port_, key);
  if (fd_ < 0) return Unavailable(what + ": not connected");
  RM_RETURN_IF_ERROR(WriteFull(fd_, Frame(op, key, value), what));
  auto deadline = Clock::now() + timeout;
  uint8_t status;
  Status st = ReadFull(fd_, &status, 1, deadline, what);
  if (st.code() == StatusCode::kDeadlineExceeded) {
    // The server still owes us this reply, so this connection is out of step:
    // start a fresh one for later calls.
    close(fd_);
    auto fresh = Connect(host_, port_, std::chrono::seconds(5));
    fd_ = fresh.ok() ? (*fresh)->Release() : -1;
    return DeadlineExceeded(fmt::format("store: key \"{}\" did not appear in {} ms", key, timeout.count()));
  }
  RM_RETURN_IF_ERROR(st);
  uint64_t n;
  RM_RETURN_IF_ERROR(ReadFull(fd_, &n, 8, deadline, what));
  std::string out(n, '\0');
  RM_RETURN_IF_ERROR(ReadFull(fd_, out.data(), n, deadline, what));
  return out;
}

Status TcpStore::Set(const std::string& key, const std::string& value) {
  return Call(kSet, key, value, std::chrono::seconds(30)).status();
}

StatusOr<std::string> TcpStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  return Call(kGet, key, "", timeout);
}

StatusOr<int64_t> TcpStore::Add(const std::string& key, int64_t delta) {
  RM_ASSIGN_OR_RETURN(std::string v, Call(kAdd, key, std::to_string(delta), std::chrono::seconds(30)));
  return std::stoll(v);
}

}  // namespace ringmaster::comm
