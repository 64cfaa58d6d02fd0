#include "agent/executor/disk_guard.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <utility>

#include "agent/executor/safe_fs.h"

namespace ringmaster::agent {
namespace {

// One directory of the walk: the subdirectories still to enter, and who it
// is, to check that ".." leads back to it.
struct Level {
  std::vector<std::string> subdirs;
  dev_t dev = 0;
  ino_t ino = 0;
};

class Walk {
 public:
  explicit Walk(size_t max_entries) : left_(max_entries) {}

  DiskUse Measure(const std::string& dir) {
    UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!fd || fstat(fd.get(), &st) != 0) return use_;
    dev_ = st.st_dev;
    use_.bytes += static_cast<int64_t>(st.st_blocks) * 512;
    std::vector<Level> stack;
    stack.push_back(Read(fd.get(), st));
    while (!stack.empty() && use_.complete) {
      Level& top = stack.back();
      if (top.subdirs.empty()) {
        stack.pop_back();
        if (stack.empty()) break;
        // Up one level without holding a descriptor per level: the parent
        // must be the directory we came from, or the tree moved (a task
        // renaming its dirs under the walk): the pass ends here.
        UniqueFd up(openat(fd.get(), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        struct stat ust {};
        if (!up || fstat(up.get(), &ust) != 0 || ust.st_dev != stack.back().dev || ust.st_ino != stack.back().ino) {
          use_.complete = false;
          break;
        }
        fd = std::move(up);
        continue;
      }
      const std::string name = std::move(top.subdirs.back());
      top.subdirs.pop_back();
      UniqueFd child(openat(fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      struct stat cst {};
      if (!child || fstat(child.get(), &cst) != 0 || cst.st_dev != dev_) continue;  // gone, replaced or a mount
      fd = std::move(child);
      stack.push_back(Read(fd.get(), cst));
    }
    return use_;
  }

 private:
  // Counts the directory's entries and lists its subdirectories.
  Level Read(int fd, const struct stat& self) {
    Level level{{}, self.st_dev, self.st_ino};
    const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    DIR* d = copy >= 0 ? fdopendir(copy) : nullptr;
    if (!d) {
      if (copy >= 0) close(copy);
      return level;
    }
    while (dirent* e = readdir(d)) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      if (left_ == 0) {
        use_.complete = false;
        use_.too_many = true;
        break;
      }
      --left_;
      struct stat st {};
      if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_dev != dev_) continue;
      if (S_ISDIR(st.st_mode)) level.subdirs.emplace_back(e->d_name);
      if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) {
        // Root's hard links are the agent's staged inputs (its cache's files,
        // counted there): a task cannot link a file of root's (protected_hardlinks).
        if (st.st_uid == 0) continue;
        if (!linked_.insert({st.st_dev, st.st_ino}).second) continue;
      }
      use_.bytes += static_cast<int64_t>(st.st_blocks) * 512;
    }
    closedir(d);
    return level;
  }

  size_t left_;
  dev_t dev_ = 0;
  DiskUse use_;
  std::set<std::pair<dev_t, ino_t>> linked_;
};

}  // namespace

DiskUse MeasureTree(const std::string& dir, size_t max_entries) { return Walk(max_entries).Measure(dir); }

DiskGuard::DiskGuard(std::chrono::milliseconds interval, OnOver on_over, size_t max_entries)
    : interval_(interval), on_over_(std::move(on_over)), max_entries_(max_entries) {
  if (interval_.count() > 0) thread_ = std::thread([this] { Run(); });
}

DiskGuard::~DiskGuard() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DiskGuard::Watch(const std::string& key, int64_t limit, std::vector<std::string> dirs) {
  std::lock_guard<std::mutex> l(mu_);
  watched_[key] = Watched{limit, std::move(dirs), false};
}

void DiskGuard::Forget(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  watched_.erase(key);
}

void DiskGuard::CheckAll() {
  std::map<std::string, Watched> now;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [key, w] : watched_) {
      if (!w.over) now[key] = w;
    }
  }
  // Measured without the lock: a walk may take a while, and Watch/Forget
  // (the executor's Start and Release) must not wait for it.
  for (const auto& [key, w] : now) {
    int64_t used = 0;
    for (const std::string& dir : w.dirs) {
      const DiskUse use = MeasureTree(dir, max_entries_);
      if (use.too_many) {
        used = -1;
        break;
      }
      used += use.bytes;
    }
    if (used >= 0 && used <= w.limit) continue;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = watched_.find(key);
      if (it == watched_.end() || it->second.over) continue;  // forgotten meanwhile
      it->second.over = true;
    }
    on_over_(key, used, w.limit);
  }
}

void DiskGuard::Run() {
  std::unique_lock<std::mutex> l(mu_);
  while (!cv_.wait_for(l, interval_, [this] { return stopping_; })) {
    l.unlock();
    CheckAll();
    l.lock();
  }
}

}  // namespace ringmaster::agent
