// `fake-cgroupfs MOUNTPOINT [--controllers cpu,io,memory,pids] [--tick-ms 10]`:
// serves a FakeCgroupTree (fake_cgroupfs_model.h) as a FUSE filesystem, in
// the foreground, until SIGTERM or an unmount. Every file is direct I/O (its
// content is made at each read, as kernfs does), writes reach the model one
// write(2) at a time, and poll(2) reports POLLPRI on notifying files
// (memory.events, cgroup.events) until they are read again, as on kernfs.
// A thread runs the model's Tick every --tick-ms.

#define FUSE_USE_VERSION 31

#include <fuse.h>
#include <poll.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/node/testing/fake_cgroupfs_model.h"
#include "common/strings.h"

namespace {

using ringmaster::agent::testing::FakeCgroupTree;

FakeCgroupTree* tree = nullptr;

// An open file: its path and the generation it last read (for POLLPRI).
struct Open {
  std::string path;
  uint64_t seen = 0;
  fuse_pollhandle* poll = nullptr;
};
std::mutex opens_mu;
std::map<uint64_t, Open> opens;  // GUARDED_BY(opens_mu), by fh
uint64_t next_fh = 1;

// Wakes the pollers of files whose generation moved past what they read.
void NotifyPollers() {
  std::lock_guard<std::mutex> l(opens_mu);
  for (auto& [fh, o] : opens) {
    if (o.poll && tree->Generation(o.path) != o.seen) {
      fuse_notify_poll(o.poll);
      fuse_pollhandle_destroy(o.poll);
      o.poll = nullptr;
    }
  }
}

int GetAttr(const char* path, struct stat* st, fuse_file_info*) {
  const int mode = tree->Mode(path);
  if (!mode) return -ENOENT;
  memset(st, 0, sizeof *st);
  st->st_mode = static_cast<mode_t>(mode);
  st->st_nlink = S_ISDIR(mode) ? 2 : 1;
  st->st_size = 0;  // as kernfs: the size of a cgroup file says nothing
  return 0;
}

int ReadDir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*, fuse_readdir_flags) {
  std::vector<std::string> names;
  if (int rc = tree->List(path, &names); rc < 0) return rc;
  fill(buf, ".", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  fill(buf, "..", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  for (const std::string& n : names) {
    // The type, so readdir's d_type tells a cgroup from a file, as on kernfs.
    struct stat st {};
    st.st_mode = static_cast<mode_t>(tree->Mode(std::string(path) + (path[1] ? "/" : "") + n));
    fill(buf, n.c_str(), &st, 0, static_cast<fuse_fill_dir_flags>(0));
  }
  return 0;
}

int OpenFile(const char* path, fuse_file_info* fi) {
  const int mode = tree->Mode(path);
  if (!mode) return -ENOENT;
  const int acc = fi->flags & O_ACCMODE;
  if ((acc != O_RDONLY && !(mode & 0200)) || (acc != O_WRONLY && !(mode & 0400))) return -EACCES;
  fi->direct_io = 1;
  fi->keep_cache = 0;
  std::lock_guard<std::mutex> l(opens_mu);
  fi->fh = next_fh++;
  opens[fi->fh] = Open{path, tree->Generation(path), nullptr};
  return 0;
}

int Release(const char*, fuse_file_info* fi) {
  std::lock_guard<std::mutex> l(opens_mu);
  auto it = opens.find(fi->fh);
  if (it != opens.end()) {
    if (it->second.poll) fuse_pollhandle_destroy(it->second.poll);
    opens.erase(it);
  }
  return 0;
}

int Read(const char* path, char* buf, size_t size, off_t off, fuse_file_info* fi) {
  std::string content;
  uint64_t gen = 0;
  if (int rc = tree->Read(path, &content, &gen); rc < 0) return rc;
  {
    std::lock_guard<std::mutex> l(opens_mu);
    if (auto it = opens.find(fi->fh); it != opens.end()) it->second.seen = gen;
  }
  if (static_cast<size_t>(off) >= content.size()) return 0;
  const size_t n = std::min(size, content.size() - static_cast<size_t>(off));
  memcpy(buf, content.data() + off, n);
  return static_cast<int>(n);
}

int Write(const char* path, const char* buf, size_t size, off_t, fuse_file_info*) {
  const int rc = tree->Write(path, std::string(buf, size));
  NotifyPollers();
  return rc < 0 ? rc : static_cast<int>(size);
}

int Poll(const char* path, fuse_file_info* fi, fuse_pollhandle* ph, unsigned* revents) {
  // kernfs: always readable and writable; POLLPRI|POLLERR once changed since the last read.
  unsigned r = POLLIN | POLLOUT | POLLRDNORM | POLLWRNORM;
  std::lock_guard<std::mutex> l(opens_mu);
  auto it = opens.find(fi->fh);
  if (it != opens.end()) {
    if (tree->Generation(path) != it->second.seen) r |= POLLPRI | POLLERR;
    if (ph) {
      if (it->second.poll) fuse_pollhandle_destroy(it->second.poll);
      it->second.poll = ph;
      ph = nullptr;
    }
  }
  if (ph) fuse_pollhandle_destroy(ph);
  *revents = r;
  return 0;
}

int Truncate(const char* path, off_t, fuse_file_info*) { return tree->Mode(path) ? 0 : -ENOENT; }  // `echo x >` truncates
int Mkdir(const char* path, mode_t) { return tree->Mkdir(path); }
int Rmdir(const char* path) { return tree->Rmdir(path); }
int Create(const char*, mode_t, fuse_file_info*) { return -EACCES; }
int Unlink(const char*) { return -EPERM; }
int Chmod(const char*, mode_t, fuse_file_info*) { return -EPERM; }  // delegation: not modelled
int Chown(const char*, uid_t, gid_t, fuse_file_info*) { return -EPERM; }

void* Init(fuse_conn_info*, fuse_config* cfg) {
  // Nothing cached: a cgroup made or removed shows at once, and so does a file's new content.
  cfg->entry_timeout = 0;
  cfg->attr_timeout = 0;
  cfg->negative_timeout = 0;
  cfg->direct_io = 1;
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: fake-cgroupfs MOUNTPOINT [--controllers cpu,io,memory,pids] [--tick-ms 10]\n");
    return 2;
  }
  std::vector<std::string> controllers = {"cpu", "io", "memory", "pids"};
  int tick_ms = 10;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--controllers") {
      controllers = ringmaster::Split(argv[i + 1], ',', {.skip_empty = false});
    } else if (flag == "--tick-ms") {
      tick_ms = std::max(1, atoi(argv[i + 1]));
    } else {
      fprintf(stderr, "fake-cgroupfs: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  FakeCgroupTree model(controllers);
  tree = &model;
  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    while (!stop) {
      model.Tick();
      NotifyPollers();
      std::this_thread::sleep_for(std::chrono::milliseconds(tick_ms));
    }
  });
  fuse_operations ops{};
  ops.getattr = GetAttr;
  ops.readdir = ReadDir;
  ops.open = OpenFile;
  ops.release = Release;
  ops.read = Read;
  ops.write = Write;
  ops.poll = Poll;
  ops.truncate = Truncate;
  ops.mkdir = Mkdir;
  ops.rmdir = Rmdir;
  ops.create = Create;
  ops.unlink = Unlink;
  ops.chmod = Chmod;
  ops.chown = Chown;
  ops.init = Init;
  // Foreground, one thread for requests; allow_other: task uids reach it as on a real host.
  std::vector<const char*> args = {argv[0], argv[1], "-f", "-s", "-o", "allow_other,fsname=fake-cgroupfs"};
  const int rc = fuse_main(static_cast<int>(args.size()), const_cast<char**>(args.data()), &ops, nullptr);
  stop = true;
  ticker.join();
  return rc;
}
