#include "agent/executor/task_users.h"

#include <grp.h>
#include <pwd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <fmt/format.h>

namespace ringmaster::agent {
namespace {

struct Account {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;
};

std::optional<Account> LookUpAccount(const std::string& name) {
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
  passwd pw{};
  passwd* found = nullptr;
  while (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) == ERANGE) buf.resize(buf.size() * 2);
  if (!found) return std::nullopt;
  return Account{pw.pw_name, pw.pw_uid, pw.pw_gid, pw.pw_dir ? pw.pw_dir : ""};
}

std::optional<Account> AccountOf(uid_t uid) {
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
  passwd pw{};
  passwd* found = nullptr;
  while (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == ERANGE) buf.resize(buf.size() * 2);
  if (!found) return std::nullopt;
  return Account{pw.pw_name, pw.pw_uid, pw.pw_gid, pw.pw_dir ? pw.pw_dir : ""};
}

std::vector<gid_t> GroupsOf(const Account& a) {
  int n = 32;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  while (getgrouplist(a.name.c_str(), a.gid, groups.data(), &n) < 0) groups.resize(static_cast<size_t>(n) * 2);
  groups.resize(static_cast<size_t>(n));
  return groups;
}

bool ParseUid(const std::string& s, uid_t* out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 10) return false;
  unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  // (uid_t)-1 means "no change" to setresuid and (uid_t)-2 is often nfsnobody.
  if (v >= 0xfffffffeULL) return false;
  *out = static_cast<uid_t>(v);
  return true;
}

}  // namespace

std::string TaskIdentity::Describe() const {
  if (!account.empty()) return fmt::format("uid {} (user {}, account {})", uid, user, account);
  return fmt::format("uid {} (user {})", uid, user);
}

StatusOr<TaskUsers> TaskUsers::Create(const TaskUsersOptions& o, uid_t agent_uid) {
  TaskUsers t;
  if (agent_uid != 0) {
    // Without root there is no switching: say so rather than pretend.
    if (!o.uid_range.empty() && o.uid_range != "none") {
      return FailedPrecondition("--task-uids: the agent is not root, so it cannot run tasks as other uids");
    }
    if (!o.accounts.empty()) {
      return FailedPrecondition("--task-user: the agent is not root, so it cannot run tasks as other accounts");
    }
    t.self_.uid = agent_uid;
    t.self_.gid = getegid();
    if (auto a = AccountOf(agent_uid)) t.self_.account = a->name;
    if (const char* home = getenv("HOME")) t.self_.home = home;
    return t;
  }
  t.isolating_ = true;

  const std::string range = o.uid_range.empty() ? fmt::format("{}-{}", kDefaultLo, kDefaultHi) : o.uid_range;
  if (range != "none") {
    const size_t dash = range.find('-');
    if (dash == std::string::npos || !ParseUid(range.substr(0, dash), &t.lo_) ||
        !ParseUid(range.substr(dash + 1), &t.hi_) || t.lo_ > t.hi_) {
      return InvalidArgument(fmt::format("--task-uids: \"{}\" is not a uid range like {}-{} (or none)", range,
                                         kDefaultLo, kDefaultHi));
    }
    if (t.lo_ < kMinUid) {
      return InvalidArgument(fmt::format("--task-uids: {} includes system uids (below {}); pick a range like {}-{}",
                                         range, kMinUid, kDefaultLo, kDefaultHi));
    }
    // A uid an account already has would give tasks that account's files.
    setpwent();
    while (passwd* pw = getpwent()) {
      if (pw->pw_uid >= t.lo_ && pw->pw_uid <= t.hi_) {
        std::string name = pw->pw_name;
        uid_t uid = pw->pw_uid;
        endpwent();
        return InvalidArgument(fmt::format(
            "--task-uids: {} includes the account {} (uid {}); pick a range no account uses", range, name, uid));
      }
    }
    endpwent();
    // So would a gid a group already has (a task's gid is its uid).
    setgrent();
    while (group* gr = getgrent()) {
      if (gr->gr_gid >= t.lo_ && gr->gr_gid <= t.hi_) {
        std::string name = gr->gr_name;
        gid_t gid = gr->gr_gid;
        endgrent();
        return InvalidArgument(fmt::format(
            "--task-uids: {} includes the group {} (gid {}); pick a range no group uses", range, name, gid));
      }
    }
    endgrent();
    t.has_range_ = true;
  }

  for (const std::string& kv : o.accounts) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == kv.size()) {
      return InvalidArgument("--task-user: \"" + kv + "\" is not user=account (e.g. alice=alice_unix)");
    }
    const std::string user = kv.substr(0, eq), name = kv.substr(eq + 1);
    auto a = LookUpAccount(name);
    if (!a) return InvalidArgument(fmt::format("--task-user: {}: no account {} on this host", kv, name));
    if (a->uid == 0) return InvalidArgument(fmt::format("--task-user: {}: {} is root (uid 0); tasks never run as root", kv, name));
    if (a->uid < kMinUid) {
      return InvalidArgument(fmt::format("--task-user: {}: {} is a system account (uid {} < {}); map a person's account",
                                         kv, name, a->uid, kMinUid));
    }
    TaskIdentity id;
    id.uid = a->uid;
    id.gid = a->gid;
    id.groups = GroupsOf(*a);
    // Groups that are root in all but name: a task in one could become root.
    static const char* const kPrivileged[] = {"root", "sudo", "wheel", "admin", "docker", "lxd", "disk", "shadow", "kmem"};
    for (gid_t g : id.groups) {
      if (g == 0 || id.gid == 0) {
        return InvalidArgument(fmt::format("--task-user: {}: {} is in group 0 (root); tasks never run in it", kv, name));
      }
      const group* gr = getgrgid(g);
      for (const char* p : kPrivileged) {
        if (gr && std::string(gr->gr_name) == p) {
          return InvalidArgument(fmt::format(
              "--task-user: {}: {} is in group {}, which can become root; map an account outside it", kv, name, p));
        }
      }
    }
    id.user = user;
    id.account = a->name;
    id.home = a->home;
    id.switch_user = true;
    if (t.accounts_.count(user)) return InvalidArgument("--task-user: " + user + " is mapped twice");
    t.accounts_[user] = id;
  }
  if (!t.has_range_ && t.accounts_.empty()) {
    return InvalidArgument("--task-uids none: map at least one user with --task-user, or give a uid range");
  }
  return t;
}

StatusOr<TaskIdentity> TaskUsers::Resolve(int64_t user_id, const std::string& name) const {
  if (!isolating_) {
    TaskIdentity id = self_;
    id.user = name;
    return id;
  }
  if (auto it = accounts_.find(name); it != accounts_.end()) return it->second;
  if (!has_range_) {
    return PermissionDenied(fmt::format("user {} has no account on this node: map it with --task-user {}=ACCOUNT",
                                        name, name));
  }
  if (user_id <= 0 || static_cast<uint64_t>(user_id) > static_cast<uint64_t>(hi_ - lo_)) {
    return PermissionDenied(fmt::format("user {} (id {}) has no uid on this node: --task-uids {}-{} covers user ids 1 to {}",
                                        name, user_id, lo_, hi_, hi_ - lo_));
  }
  TaskIdentity id;
  id.uid = lo_ + static_cast<uid_t>(user_id);
  id.gid = id.uid;
  id.user = name;
  id.switch_user = true;
  return id;
}

std::string TaskUsers::Describe() const {
  if (!isolating_) {
    return fmt::format("the agent is not root (uid {}): tasks run as this same user, so users are not isolated "
                       "from each other (run the agent as root to give each user its own uid)",
                       self_.uid);
  }
  std::string out = "tasks run as unprivileged uids:";
  if (has_range_) out += fmt::format(" user N as uid {}+N (--task-uids {}-{})", lo_, lo_, hi_);
  for (const auto& [user, id] : accounts_) out += fmt::format("; {} as {} (uid {})", user, id.account, id.uid);
  return out;
}

}  // namespace ringmaster::agent
