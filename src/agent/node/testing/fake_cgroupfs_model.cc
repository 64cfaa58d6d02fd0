#include "agent/node/testing/fake_cgroupfs_model.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include <fmt/format.h>

namespace ringmaster::agent::testing {
namespace {

constexpr int64_t kPage = 4096;
constexpr int64_t kMax = INT64_MAX;  // "max"
// The kernel's order of controllers in cgroup.controllers and subtree_control.
const std::vector<std::string> kKnown = {"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"};

std::string Strip(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> Tokens(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

// simple_strtoull(s, &end, 0): decimal, 0x hex or 0 octal; false if no digit.
bool ParseU64(const std::string& s, size_t* used, uint64_t* v) {
  if (s.empty() || !isdigit(static_cast<unsigned char>(s[0]))) return false;
  errno = 0;
  char* end = nullptr;
  *v = strtoull(s.c_str(), &end, 0);
  *used = static_cast<size_t>(end - s.c_str());
  return errno == 0;
}

// The kernel's page_counter_memparse: "max", or memparse (a number, then an
// optional K/M/G/T/P/E suffix, each 1024 times the last), nothing after it.
bool ParseMemory(const std::string& text, int64_t* bytes) {
  const std::string s = Strip(text);
  if (s == "max") {
    *bytes = kMax;
    return true;
  }
  size_t used = 0;
  uint64_t v = 0;
  if (!ParseU64(s, &used, &v)) return false;
  int shift = 0;
  if (used < s.size()) {
    const char* suffixes = "kmgtpe";
    const char* at = strchr(suffixes, tolower(static_cast<unsigned char>(s[used])));
    if (!at || used + 1 != s.size()) return false;
    shift = 10 * static_cast<int>(at - suffixes + 1);
  }
  if (shift && v > (UINT64_MAX >> shift)) return false;
  v <<= shift;
  *bytes = v >= static_cast<uint64_t>(kMax) ? kMax : static_cast<int64_t>(v) / kPage * kPage;  // whole pages
  return true;
}

std::string FormatMax(int64_t v) { return v == kMax ? "max" : std::to_string(v); }

}  // namespace

struct FakeCgroupTree::Node {
  std::string name;
  Node* parent = nullptr;
  std::map<std::string, std::unique_ptr<Node>> children;
  std::set<std::string> subtree;  // cgroup.subtree_control
  // Limits: memory.{max,high,low,min,swap.max}, pids.max, cpu quota/period, ...
  std::map<std::string, int64_t> limits = {{"memory.max", kMax},      {"memory.high", kMax}, {"memory.low", 0},
                                           {"memory.min", 0},         {"memory.swap.max", kMax},
                                           {"memory.oom.group", 0},   {"pids.max", kMax},
                                           {"cpu.quota", kMax},       {"cpu.period", 100000},
                                           {"cpu.weight", 100}};
  std::map<std::string, std::map<std::string, uint64_t>> io_max;  // "8:0" -> rbps/wbps/riops/wiops
  std::map<std::string, int64_t> events, events_local;          // memory.events keys
  int64_t pids_events_max = 0;
  // Accounting (Tick): hierarchical sums.
  int64_t current = 0, peak = 0, anon = 0, file = 0, tasks = 0;
  uint64_t dead_user = 0, dead_system = 0, user = 0, system = 0;  // ticks
  bool populated = false;
  std::map<std::string, uint64_t> gen;  // notifying files' generations
};

FakeCgroupTree::FakeCgroupTree(std::vector<std::string> controllers, std::string proc_root, std::string sys_root)
    : offered_(std::move(controllers)), proc_root_(std::move(proc_root)), sys_root_(std::move(sys_root)),
      root_(std::make_unique<Node>()) {}

FakeCgroupTree::~FakeCgroupTree() = default;

FakeCgroupTree::Node* FakeCgroupTree::Find(const std::string& path, std::string* file) {
  Node* n = root_.get();
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '/');) {
    if (!p.empty()) parts.push_back(p);
  }
  file->clear();
  for (size_t i = 0; i < parts.size(); ++i) {
    auto it = n->children.find(parts[i]);
    if (it != n->children.end()) {
      n = it->second.get();
      continue;
    }
    if (i + 1 != parts.size() || !Files(n).count(parts[i])) return nullptr;
    *file = parts[i];
  }
  return n;
}

std::set<std::string> FakeCgroupTree::Files(const Node* n) const {
  std::set<std::string> f = {"cgroup.controllers", "cgroup.subtree_control", "cgroup.procs", "cgroup.stat", "cpu.stat"};
  if (!n->parent) return f;
  for (const char* core : {"cgroup.events", "cgroup.type", "cgroup.kill"}) f.insert(core);
  const std::set<std::string>& on = n->parent->subtree;
  if (on.count("memory")) {
    for (const char* m : {"memory.current", "memory.max", "memory.high", "memory.low", "memory.min", "memory.peak",
                          "memory.swap.max", "memory.swap.current", "memory.events", "memory.events.local",
                          "memory.stat", "memory.oom.group"}) {
      f.insert(m);
    }
  }
  if (on.count("cpu")) f.insert({"cpu.max", "cpu.weight"});
  if (on.count("pids")) f.insert({"pids.max", "pids.current", "pids.events"});
  if (on.count("io")) f.insert({"io.max", "io.stat", "io.weight"});
  return f;
}

int FakeCgroupTree::Mode(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  std::string file;
  Node* n = Find(path, &file);
  if (!n) return 0;
  if (file.empty()) return S_IFDIR | 0755;
  if (file == "cgroup.kill") return S_IFREG | 0200;
  static const std::set<std::string> writable = {
      "cgroup.subtree_control", "cgroup.procs", "cgroup.type", "memory.max", "memory.high", "memory.low",
      "memory.min", "memory.swap.max", "memory.oom.group", "cpu.max", "cpu.weight", "pids.max", "io.max", "io.weight"};
  return S_IFREG | (writable.count(file) ? 0644 : 0444);
}

int FakeCgroupTree::List(const std::string& path, std::vector<std::string>* names) {
  std::lock_guard<std::mutex> l(mu_);
  std::string file;
  Node* n = Find(path, &file);
  if (!n) return -ENOENT;
  if (!file.empty()) return -ENOTDIR;
  for (const std::string& f : Files(n)) names->push_back(f);
  for (const auto& [name, child] : n->children) names->push_back(name);
  return 0;
}

int FakeCgroupTree::Read(const std::string& path, std::string* out, uint64_t* generation) {
  std::lock_guard<std::mutex> l(mu_);
  std::string file;
  Node* n = Find(path, &file);
  if (!n) return -ENOENT;
  if (file.empty()) return -EISDIR;
  if (file == "cgroup.kill") return -EACCES;
  *out = ReadLocked(n, file);
  if (generation) *generation = n->gen[file];
  return 0;
}

uint64_t FakeCgroupTree::Generation(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  std::string file;
  Node* n = Find(path, &file);
  return n ? n->gen[file] : 0;
}

std::string FakeCgroupTree::ReadLocked(Node* n, const std::string& file) {
  auto ordered = [](const std::set<std::string>& s) {
    std::string out;
    for (const std::string& c : kKnown) {
      if (s.count(c)) out += (out.empty() ? "" : " ") + c;
    }
    return out + "\n";
  };
  const auto hz = static_cast<uint64_t>(sysconf(_SC_CLK_TCK));
  auto usec = [hz](uint64_t ticks) { return ticks * 1'000'000 / hz; };
  auto keyed = [](const std::map<std::string, int64_t>& m) {
    std::string out;
    for (const char* k : {"low", "high", "max", "oom", "oom_kill", "oom_group_kill"}) {
      auto it = m.find(k);
      out += fmt::format("{} {}\n", k, it == m.end() ? 0 : it->second);
    }
    return out;
  };
  if (file == "cgroup.controllers") return ordered(n->parent ? n->parent->subtree : std::set<std::string>(offered_.begin(), offered_.end()));
  if (file == "cgroup.subtree_control") return ordered(n->subtree);
  if (file == "cgroup.procs") {
    std::string out;
    for (const auto& [pid, m] : members_) {
      if (m.node == n) out += std::to_string(pid) + "\n";
    }
    return out;
  }
  if (file == "cgroup.events") return fmt::format("populated {}\nfrozen 0\n", Populated(n) ? 1 : 0);
  if (file == "cgroup.type") return "domain\n";
  if (file == "cgroup.stat") {
    std::function<int(const Node*)> count = [&](const Node* x) {
      int c = 0;
      for (const auto& [name, child] : x->children) c += 1 + count(child.get());
      return c;
    };
    return fmt::format("nr_descendants {}\nnr_dying_descendants 0\n", count(n));
  }
  if (file == "cpu.stat") {
    std::string out = fmt::format("usage_usec {}\nuser_usec {}\nsystem_usec {}\n", usec(n->user + n->system),
                                  usec(n->user), usec(n->system));
    if (n->parent && n->parent->subtree.count("cpu")) {
      out += "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n";  // not modelled
    }
    return out;
  }
  if (file == "memory.current") return fmt::format("{}\n", n->current);
  if (file == "memory.peak") return fmt::format("{}\n", n->peak);
  if (file == "memory.swap.current") return "0\n";
  if (file == "memory.events") return keyed(n->events);
  if (file == "memory.events.local") return keyed(n->events_local);
  if (file == "memory.stat") {
    return fmt::format("anon {}\nfile {}\nkernel 0\nshmem 0\ninactive_anon 0\nactive_anon {}\ninactive_file 0\n"
                       "active_file {}\n", n->anon, n->file, n->anon, n->file);
  }
  if (file == "memory.max" || file == "memory.high" || file == "memory.low" || file == "memory.min" ||
      file == "memory.swap.max" || file == "pids.max" || file == "memory.oom.group" || file == "cpu.weight") {
    return FormatMax(n->limits[file]) + "\n";
  }
  if (file == "cpu.max") return fmt::format("{} {}\n", FormatMax(n->limits["cpu.quota"]), n->limits["cpu.period"]);
  if (file == "pids.current") return fmt::format("{}\n", n->tasks);
  if (file == "pids.events") return fmt::format("max {}\n", n->pids_events_max);
  if (file == "io.max") {
    std::string out;
    for (const auto& [dev, v] : n->io_max) {
      auto f = [&](const char* k) {
        auto it = v.find(k);
        return it == v.end() || it->second == UINT64_MAX ? std::string("max") : std::to_string(it->second);
      };
      out += fmt::format("{} rbps={} wbps={} riops={} wiops={}\n", dev, f("rbps"), f("wbps"), f("riops"), f("wiops"));
    }
    return out;
  }
  if (file == "io.weight") return "default 100\n";
  return "";  // io.stat: not modelled
}

int FakeCgroupTree::Write(const std::string& path, const std::string& data) {
  std::lock_guard<std::mutex> l(mu_);
  std::string file;
  Node* n = Find(path, &file);
  if (!n) return -ENOENT;
  if (file.empty()) return -EISDIR;
  return WriteLocked(n, file, data);
}

int FakeCgroupTree::WriteLocked(Node* n, const std::string& file, const std::string& data) {
  const std::string s = Strip(data);
  if (file == "cgroup.subtree_control") return WriteSubtreeControl(n, s);
  if (file == "cgroup.procs") return WriteProcs(n, s);
  if (file == "io.max") return WriteIoMax(n, s);
  if (file == "cgroup.kill") {
    size_t used = 0;
    uint64_t v = 0;
    if (!ParseU64(s, &used, &v) || used != s.size()) return -EINVAL;
    if (v != 1) return -ERANGE;
    KillSubtree(n);
    return 0;
  }
  if (file == "memory.max" || file == "memory.high" || file == "memory.low" || file == "memory.min" ||
      file == "memory.swap.max") {
    int64_t bytes = 0;
    if (!ParseMemory(s, &bytes)) return -EINVAL;
    n->limits[file] = bytes;
    return 0;
  }
  if (file == "memory.oom.group" || file == "cpu.weight" || file == "pids.max") {
    int64_t v = kMax;
    if (!(file == "pids.max" && s == "max")) {
      // kstrtoint: decimal digits only here, no sign.
      if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 18) return -EINVAL;
      v = std::stoll(s);
      if (file == "cpu.weight" && (v < 1 || v > 10000)) return -ERANGE;
      if ((file == "memory.oom.group" && v > 1) || (file == "pids.max" && v > (1 << 22))) return -EINVAL;
    }
    n->limits[file] = v;
    return 0;
  }
  if (file == "cpu.max") {
    // "max|QUOTA [PERIOD]" in microseconds: 1 ms <= quota, 1 ms <= period <= 1 s.
    const std::vector<std::string> t = Tokens(s);
    if (t.empty() || t.size() > 2) return -EINVAL;
    int64_t quota = kMax, period = n->limits["cpu.period"];
    size_t used = 0;
    uint64_t v = 0;
    if (t[0] != "max") {
      if (!ParseU64(t[0], &used, &v) || used != t[0].size() || t[0][0] == '0') return -EINVAL;
      quota = static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX));
    }
    if (t.size() == 2) {
      if (!ParseU64(t[1], &used, &v) || used != t[1].size()) return -EINVAL;
      period = static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX));
    }
    if (period < 1000 || period > 1'000'000 || (quota != kMax && quota < 1000)) return -EINVAL;
    n->limits["cpu.quota"] = quota;
    n->limits["cpu.period"] = period;
    return 0;
  }
  if (file == "cgroup.type" || file == "io.weight") return -EOPNOTSUPP;  // not modelled
  return -EACCES;  // read-only
}

int FakeCgroupTree::WriteSubtreeControl(Node* n, const std::string& s) {
  std::set<std::string> enable, disable;
  for (const std::string& t : Tokens(s)) {
    const std::string c = t.substr(1);
    if ((t[0] != '+' && t[0] != '-') || std::find(kKnown.begin(), kKnown.end(), c) == kKnown.end()) return -EINVAL;
    (t[0] == '+' ? enable : disable).insert(c);
  }
  const std::set<std::string> offered = n->parent ? n->parent->subtree : std::set<std::string>(offered_.begin(), offered_.end());
  for (const std::string& c : enable) {
    if (disable.count(c)) return -EINVAL;
    if (!offered.count(c)) return -ENOENT;
  }
  // No internal processes: a non-root cgroup with members gives its children nothing.
  bool has_members = false;
  for (const auto& [pid, m] : members_) has_members = has_members || m.node == n;
  bool adds = false;
  for (const std::string& c : enable) adds = adds || !n->subtree.count(c);
  if (n->parent && has_members && adds) return -EBUSY;
  for (const std::string& c : disable) {
    for (const auto& [name, child] : n->children) {
      if (child->subtree.count(c)) return -EBUSY;
    }
  }
  for (const std::string& c : enable) n->subtree.insert(c);
  for (const std::string& c : disable) n->subtree.erase(c);
  return 0;
}

int FakeCgroupTree::WriteProcs(Node* n, const std::string& s) {
  size_t used = 0;
  uint64_t v = 0;
  if (!ParseU64(s, &used, &v) || used != s.size() || v == 0 || v > INT_MAX) return -EINVAL;
  const auto pid = static_cast<pid_t>(v);
  ProcInfo info;
  if (!ReadProc(pid, &info) || info.zombie) return -ESRCH;
  if (n->parent && !n->subtree.empty()) return -EBUSY;  // no internal processes
  auto it = members_.find(pid);
  if (it != members_.end() && it->second.start == info.start) {
    Refresh(&it->second, info);
    Leave(it->second);
    members_.erase(it);
  }
  seen_.erase(pid);
  if (!n->parent) {
    seen_[pid] = info.start;  // back in the root, which lists no process (not modelled)
    return 0;
  }
  // Its CPU time from now on counts here.
  members_[pid] = Member{n, info.start, info.user, info.system, 0, 0};
  UpdatePopulated(root_.get());
  return 0;
}

int FakeCgroupTree::WriteIoMax(Node* n, const std::string& s) {
  // "MAJ:MIN key=value...": a whole disk (a partition or no such device: ENODEV).
  std::vector<std::string> t = Tokens(s);
  unsigned major = 0, minor = 0;
  char extra = 0;
  if (t.empty() || sscanf(t[0].c_str(), "%u:%u%c", &major, &minor, &extra) != 2) return -EINVAL;
  const std::string dev = fmt::format("{}:{}", major, minor);
  const std::string sys = sys_root_ + "/dev/block/" + dev;
  if (access(sys.c_str(), F_OK) != 0 || access((sys + "/partition").c_str(), F_OK) == 0) return -ENODEV;
  std::map<std::string, uint64_t> v = n->io_max[dev];
  for (size_t i = 1; i < t.size(); ++i) {
    const size_t eq = t[i].find('=');
    if (eq == std::string::npos) return -EINVAL;
    const std::string key = t[i].substr(0, eq), value = t[i].substr(eq + 1);
    uint64_t x = UINT64_MAX;
    size_t used = 0;
    if (value != "max" && (!ParseU64(value, &used, &x) || used != value.size())) return -EINVAL;
    if (x == 0) return -ERANGE;
    if ((key != "rbps" && key != "wbps" && key != "riops" && key != "wiops") || x == 1) return -EINVAL;
    v[key] = x;
  }
  bool any = false;
  for (const auto& [k, x] : v) any = any || x != UINT64_MAX;
  if (any) n->io_max[dev] = v;
  else n->io_max.erase(dev);
  return 0;
}

int FakeCgroupTree::Mkdir(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  const size_t slash = path.rfind('/');
  std::string file;
  Node* parent = Find(path.substr(0, slash), &file);
  const std::string name = path.substr(slash + 1);
  if (!parent || !file.empty()) return -ENOENT;
  if (parent->children.count(name) || Files(parent).count(name)) return -EEXIST;
  if (name.empty() || name.find('\n') != std::string::npos) return -EINVAL;
  auto child = std::make_unique<Node>();
  child->name = name;
  child->parent = parent;
  parent->children[name] = std::move(child);
  return 0;
}

int FakeCgroupTree::Rmdir(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  std::string file;
  Node* n = Find(path, &file);
  if (!n) return -ENOENT;
  if (!file.empty()) return -ENOTDIR;
  if (!n->parent) return -EBUSY;
  // Members that exited since the last Tick are gone by now.
  for (auto it = members_.begin(); it != members_.end();) {
    ProcInfo info;
    if (it->second.node == n && (!ReadProc(it->first, &info) || info.zombie || info.start != it->second.start)) {
      Leave(it->second);
      it = members_.erase(it);
    } else {
      ++it;
    }
  }
  if (!n->children.empty() || Populated(n)) return -EBUSY;
  // What it used stays counted above it, as the kernel keeps a gone child's stats.
  n->parent->dead_user += n->user;
  n->parent->dead_system += n->system;
  n->parent->children.erase(n->name);
  return 0;
}

void FakeCgroupTree::UpdatePopulated(Node* n) {
  for (auto& [name, child] : n->children) UpdatePopulated(child.get());
  const bool populated = Populated(n);
  if (populated != n->populated) {
    n->populated = populated;
    n->gen["cgroup.events"]++;
  }
}

bool FakeCgroupTree::Populated(const Node* n) const {
  for (const auto& [pid, m] : members_) {
    for (const Node* x = m.node; x; x = x->parent) {
      if (x == n) return true;
    }
  }
  return false;
}

bool FakeCgroupTree::ReadProc(pid_t pid, ProcInfo* info) const {
  std::ifstream in(fmt::format("{}/{}/stat", proc_root_, pid));
  std::string line;
  if (!std::getline(in, line)) return false;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 2));
  std::vector<std::string> f;  // f[0] is field 3 (state)
  for (std::string w; rest >> w;) f.push_back(w);
  if (f.size() < 22) return false;
  info->zombie = f[0] == "Z" || f[0] == "X";
  info->ppid = std::stoi(f[1]);
  info->user = std::stoull(f[11]);
  info->system = std::stoull(f[12]);
  info->threads = std::stoll(f[17]);
  info->start = std::stoull(f[19]);
  info->rss = std::stoll(f[21]) * kPage;
  std::ifstream status(fmt::format("{}/{}/status", proc_root_, pid));
  info->anon = info->file = 0;
  for (std::string k; status >> k;) {
    int64_t kb = 0;
    if (k == "RssAnon:" && status >> kb) info->anon = kb * 1024;
    if ((k == "RssFile:" || k == "RssShmem:") && status >> kb) info->file += kb * 1024;
  }
  return true;
}

void FakeCgroupTree::Refresh(Member* m, const ProcInfo& p) {
  m->user_ticks = p.user > m->base_user ? p.user - m->base_user : 0;
  m->system_ticks = p.system > m->base_system ? p.system - m->base_system : 0;
}

void FakeCgroupTree::Leave(const Member& m) {
  // Its CPU time since it joined stays with the cgroup it leaves.
  m.node->dead_user += m.user_ticks;
  m.node->dead_system += m.system_ticks;
}

void FakeCgroupTree::Event(Node* n, const std::string& key, int64_t by) {
  n->events_local[key] += by;
  n->gen["memory.events.local"]++;
  for (Node* x = n; x; x = x->parent) {
    x->events[key] += by;
    x->gen["memory.events"]++;
  }
}

void FakeCgroupTree::KillSubtree(Node* n) {
  for (const auto& [pid, m] : members_) {
    for (const Node* x = m.node; x; x = x->parent) {
      if (x == n) {
        kill(pid, SIGKILL);
        break;
      }
    }
  }
}

void FakeCgroupTree::Tick() {
  std::map<pid_t, ProcInfo> procs;
  if (DIR* d = opendir(proc_root_.c_str())) {
    while (dirent* e = readdir(d)) {
      char* end = nullptr;
      const long pid = strtol(e->d_name, &end, 10);
      ProcInfo info;
      if (*end == '\0' && pid > 0 && ReadProc(static_cast<pid_t>(pid), &info)) procs[static_cast<pid_t>(pid)] = info;
    }
    closedir(d);
  }
  std::lock_guard<std::mutex> l(mu_);
  // Members that exited (or whose pid is another process now) leave.
  for (auto it = members_.begin(); it != members_.end();) {
    auto p = procs.find(it->first);
    ProcInfo now;
    if (p == procs.end() && ReadProc(it->first, &now)) {
      p = procs.emplace(it->first, now).first;  // it joined after the scan above
    }
    if (p != procs.end() && p->second.zombie && p->second.start == it->second.start) {
      Refresh(&it->second, p->second);  // a zombie's times are final
    }
    if (p == procs.end() || p->second.zombie || p->second.start != it->second.start) {
      Leave(it->second);
      it = members_.erase(it);
      continue;
    }
    Refresh(&it->second, p->second);
    ++it;
  }
  // New processes, oldest first: a child of a member joins its cgroup (as
  // fork puts it there); anything else was never in the tree.
  std::vector<std::pair<uint64_t, pid_t>> fresh;
  for (const auto& [pid, info] : procs) {
    auto s = seen_.find(pid);
    if (members_.count(pid) || (s != seen_.end() && s->second == info.start) || info.zombie) continue;
    fresh.push_back({info.start, pid});
  }
  std::sort(fresh.begin(), fresh.end());
  for (const auto& [start, pid] : fresh) {
    const ProcInfo& info = procs[pid];
    auto parent = members_.find(info.ppid);
    if (!first_tick_ && parent != members_.end() && parent->second.start <= start) {
      members_[pid] = Member{parent->second.node, start, 0, 0, info.user, info.system};  // born here
    } else {
      seen_[pid] = start;
    }
  }
  for (auto it = seen_.begin(); it != seen_.end();) it = procs.count(it->first) ? std::next(it) : seen_.erase(it);
  first_tick_ = false;
  // Hierarchical sums, deepest first.
  std::function<void(Node*)> sum = [&](Node* n) {
    n->current = n->anon = n->file = n->tasks = 0;
    n->user = n->dead_user;
    n->system = n->dead_system;
    for (auto& [name, child] : n->children) {
      sum(child.get());
      n->current += child->current;
      n->anon += child->anon;
      n->file += child->file;
      n->tasks += child->tasks;
      n->user += child->user;
      n->system += child->system;
    }
    for (const auto& [pid, m] : members_) {
      if (m.node != n) continue;
      const ProcInfo& p = procs[pid];
      n->current += p.rss;
      n->anon += p.anon;
      n->file += p.file;
      n->tasks += p.threads;
      n->user += m.user_ticks;
      n->system += m.system_ticks;
    }
    n->peak = std::max(n->peak, n->current);
    if (n->parent && n->tasks > n->limits["pids.max"]) {
      n->pids_events_max++;
      n->gen["pids.events"]++;
    }
  };
  sum(root_.get());
  UpdatePopulated(root_.get());
  // memory.high is counted; memory.max kills, as the OOM killer would.
  std::function<void(Node*)> enforce = [&](Node* n) {
    for (auto& [name, child] : n->children) enforce(child.get());
    if (!n->parent) return;
    if (n->current > n->limits["memory.high"]) Event(n, "high");
    if (n->current <= n->limits["memory.max"]) return;
    Event(n, "max");
    Event(n, "oom");
    std::vector<pid_t> subtree;
    pid_t largest = 0;
    int64_t most = -1;
    for (const auto& [pid, m] : members_) {
      for (const Node* x = m.node; x; x = x->parent) {
        if (x != n) continue;
        subtree.push_back(pid);
        if (procs[pid].rss > most) {
          most = procs[pid].rss;
          largest = pid;
        }
        break;
      }
    }
    const bool group = n->limits["memory.oom.group"] == 1;
    std::vector<pid_t> victims = group ? subtree : std::vector<pid_t>{largest};
    for (pid_t pid : victims) {
      if (pid <= 0) continue;
      kill(pid, SIGKILL);
      const Member m = members_[pid];
      Event(m.node, "oom_kill");
      Leave(m);
      members_.erase(pid);
    }
    if (group && !victims.empty()) Event(n, "oom_group_kill");
    n->current = 0;
  };
  enforce(root_.get());
}

}  // namespace ringmaster::agent::testing
