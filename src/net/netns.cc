#include "net/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace ringmaster::net {
namespace {

// Reads errno before `what` is built.
class Errno {
 public:
  Errno() : err_(errno) {}
  Status operator()(const std::string& what) const { return Internal(what + ": " + std::strerror(err_)); }

 private:
  int err_;
};

Status OnThread(const std::function<Status()>& fn) {
  Status st;
  std::thread t([&] { st = fn(); });
  t.join();
  return st;
}

}  // namespace

Status InNewNamespace(const std::string& path, const std::function<Status()>& fn) {
  return OnThread([&]() -> Status {
    if (::unshare(CLONE_NEWNET) != 0) return Errno()("a new network namespace");
    if (::mount("/proc/thread-self/ns/net", path.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return Errno()("binding the network namespace at " + path);
    }
    return fn();
  });
}

Status InNamespace(const std::string& path, const std::function<Status()>& fn) {
  return OnThread([&]() -> Status {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno()("opening the network namespace " + path);
    if (::setns(fd, CLONE_NEWNET) != 0) {
      const Errno err;
      ::close(fd);
      return err("entering the network namespace " + path);
    }
    ::close(fd);
    return fn();
  });
}

Status WriteSysctl(const std::string& key, const std::string& value) {
  const std::string path = "/proc/sys/" + key;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Errno()("opening " + path);
  const bool ok = ::write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  Status st = ok ? Status::Ok() : Errno()("writing " + path);
  ::close(fd);
  return st;
}

}  // namespace ringmaster::net
