// FakeCgroupTree: a cgroup v2 hierarchy in memory whose files behave as the
// kernel's, for hosts that cannot give tests a real one (docs/isolation.md
// says what it models and what not). fake_cgroupfs_main.cc serves it as a
// FUSE filesystem. Writes follow the kernel's grammar and errnos; members
// are real processes, accounted from /proc by Tick. Thread-safe (one mutex).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace ringmaster::agent::testing {

class FakeCgroupTree {
 public:
  // `controllers`: what the root offers (its cgroup.controllers);
  // `proc_root`, `sys_root`: where /proc and /sys are (block devices for io.max).
  explicit FakeCgroupTree(std::vector<std::string> controllers, std::string proc_root = "/proc",
                          std::string sys_root = "/sys");
  ~FakeCgroupTree();

  // Paths are absolute in the tree: "/", "/a/b", "/a/b/memory.max".
  // 0: no such path; else S_IFDIR or S_IFREG with its permission bits.
  int Mode(const std::string& path);
  // Names in a directory (files, then child cgroups); -errno on error.
  int List(const std::string& path, std::vector<std::string>* names);
  // A file's content now, and its Generation with it; -errno on error.
  int Read(const std::string& path, std::string* out, uint64_t* generation = nullptr);
  // One write(2) of `data`, as the kernel parses it; 0 or -errno.
  int Write(const std::string& path, const std::string& data);
  int Mkdir(const std::string& path);
  int Rmdir(const std::string& path);
  // Bumped when a file that the kernel notifies on (memory.events,
  // memory.events.local, cgroup.events, pids.events) changes: poll(2) then
  // reports POLLPRI until the file is read again.
  uint64_t Generation(const std::string& path);

  // One round of accounting: members from /proc (a process forked by a
  // member joins its cgroup; one that exited leaves it), memory.current,
  // memory.peak, pids.current, cpu.stat; memory.max enforced by SIGKILL
  // (the largest member, or every member under memory.oom.group) with
  // memory.events counted, memory.high counted.
  void Tick();

 private:
  struct Node;
  struct Member {
    Node* node = nullptr;
    uint64_t start = 0;  // /proc/<pid>/stat starttime: a recycled pid is another process
    uint64_t base_user = 0, base_system = 0;   // its CPU ticks when it joined this cgroup
    uint64_t user_ticks = 0, system_ticks = 0;  // ... and since then
  };
  struct ProcInfo {
    pid_t ppid = 0;
    uint64_t start = 0, user = 0, system = 0;
    int64_t threads = 0, rss = 0, anon = 0, file = 0;
    bool zombie = false;
  };

  Node* Find(const std::string& path, std::string* file);  // REQUIRES: mu_
  std::set<std::string> Files(const Node* n) const;          // REQUIRES: mu_
  int WriteLocked(Node* n, const std::string& file, const std::string& value);
  int WriteSubtreeControl(Node* n, const std::string& value);
  int WriteProcs(Node* n, const std::string& value);
  int WriteIoMax(Node* n, const std::string& value);
  std::string ReadLocked(Node* n, const std::string& file);
  bool ReadProc(pid_t pid, ProcInfo* info) const;
  static void Refresh(Member* m, const ProcInfo& p);
  static void Leave(const Member& m);  // its CPU time stays counted where it was
  void Event(Node* n, const std::string& key, int64_t by = 1);  // counts at n and above
  void KillSubtree(Node* n);
  bool Populated(const Node* n) const;
  void UpdatePopulated(Node* n);  // cgroup.events of n and below

  std::mutex mu_;
  const std::vector<std::string> offered_;
  const std::string proc_root_, sys_root_;
  std::unique_ptr<Node> root_;
  std::map<pid_t, Member> members_;      // GUARDED_BY(mu_)
  std::map<pid_t, uint64_t> seen_;        // GUARDED_BY(mu_): non-members seen, by starttime
  bool first_tick_ = true;
};

}  // namespace ringmaster::agent::testing
