#include "net/nft.h"

#include <nftables/libnftables.h>

#include <dirent.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <set>
#include <thread>


namespace ringmaster::net {
namespace {

// libnftables (1.0.6) keeps process-wide state that its contexts share: an
// interface cache filled by the first lookup (`iif "lo"`) and released by
// every nft_ctx_free, and libgmp's allocator. Every call holds this.
std::mutex& LibraryMutex() {
  static std::mutex mu;
  return mu;
}

// Whether `fd` is a NETLINK_NETFILTER socket.
bool IsNetfilterSocket(int fd) {
  int domain = 0, protocol = 0;
  socklen_t len = sizeof domain;
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_NETLINK) return false;
  len = sizeof protocol;
  return ::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) == 0 && protocol == NETLINK_NETFILTER;
}

// The process's NETLINK_NETFILTER sockets: only contexts open them (under
// LibraryMutex), so the one a new context adds is its own.
std::set<int> NetfilterSockets() {
  std::set<int> out;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return out;
  const int skip = ::dirfd(d);
  while (dirent* e = ::readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == skip) continue;
    if (IsNetfilterSocket(fd)) out.insert(fd);
  }
  ::closedir(d);
  return out;
}

// Closes fds on a thread of its own, for the process's life: the last close
// of a netfilter socket waits for nf_tables' pending destroy work (an RCU
// grace period, several ms) that nobody needs to wait for.
void CloseLater(int fd) {
  struct Closer {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<int> fds;  // GUARDED_BY(mu)
  };
  static Closer* closer = [] {
    auto* c = new Closer;  // never freed: its thread outlives static destructors
    std::thread([c] {
      std::unique_lock<std::mutex> l(c->mu);
      for (;;) {
        c->cv.wait(l, [c] { return !c->fds.empty(); });
        const int fd = c->fds.front();
        c->fds.pop_front();
        l.unlock();
        ::close(fd);
        l.lock();
      }
    }).detach();
    return c;
  }();
  {
    std::lock_guard<std::mutex> l(closer->mu);
    closer->fds.push_back(fd);
  }
  closer->cv.notify_one();
}

// The lowest free descriptor now: where the kernel puts the next socket,
// unless another thread takes it first.
int LowestFreeFd() {
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) ::close(fd);
  return fd;
}

}  // namespace

StatusOr<std::unique_ptr<Nft>> Nft::Create() {
  std::lock_guard<std::mutex> l(LibraryMutex());
  // The context's socket is, almost always, the lowest descriptor free
  // before it: checked, and found by a scan of every descriptor (slow with
  // the hundreds an agent holds) only when another thread took that one.
  const int guess = LowestFreeFd();
  nft_ctx* ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  if (ctx == nullptr) return Internal("nftables: no context (libnftables)");
  if (nft_ctx_buffer_output(ctx) != 0 || nft_ctx_buffer_error(ctx) != 0) {
    nft_ctx_free(ctx);
    return Internal("nftables: cannot buffer a context's output");
  }
  int socket = -1;
  if (guess >= 0 && IsNetfilterSocket(guess) && !(::fcntl(guess, F_GETFD) & FD_CLOEXEC)) {
    socket = guess;
  } else {
    for (int fd : NetfilterSockets()) {
      if (!(::fcntl(fd, F_GETFD) & FD_CLOEXEC)) socket = fd;  // the others' are close-on-exec already
    }
  }
  // libnftables opens it without O_CLOEXEC: the agent's children (tasks)
  // must not inherit the node's netfilter socket.
  if (socket >= 0) ::fcntl(socket, F_SETFD, FD_CLOEXEC);
  return std::unique_ptr<Nft>(new Nft(ctx, socket));
}

Nft::~Nft() {
  // The socket's last close (slow, see CloseLater) through a duplicate, not
  // under the library's lock nor on the caller's time.
  const int last = socket_ >= 0 ? ::fcntl(socket_, F_DUPFD_CLOEXEC, 0) : -1;
  {
    std::lock_guard<std::mutex> l(LibraryMutex());
    nft_ctx_free(ctx_);
  }
  if (last >= 0) CloseLater(last);
}

StatusOr<std::string> Nft::Run(const std::string& commands, const std::string& what) {
  std::lock_guard<std::mutex> l(LibraryMutex());
  const int rc = nft_run_cmd_from_buffer(ctx_, commands.c_str());
  std::string out = nft_ctx_get_output_buffer(ctx_);
  std::string err = nft_ctx_get_error_buffer(ctx_);
  while (!err.empty() && std::isspace(static_cast<unsigned char>(err.back()))) err.pop_back();
  if (rc != 0) return Internal(what + ": " + (err.empty() ? "nft failed" : err));
  return out;
}

}  // namespace ringmaster::net
