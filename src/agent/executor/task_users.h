// TaskUsers: who a task runs as on this node. A task never runs as root:
// each Ringmaster user maps to an unprivileged uid of its own, either an
// existing account (--task-user alice=alice_unix: its uid, gid, groups and
// home) or lo + the user's id in a reserved range (--task-uids
// 200000-299999, the default for a root agent). An agent that is not root
// cannot switch uids: its tasks run as the agent's own user and users are
// not isolated from each other (isolating() is false).
// Immutable after Create; thread-safe.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::agent {

struct TaskIdentity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups; empty = none
  std::string user;           // the Ringmaster user's name: $USER, and named in errors
  std::string account;        // the mapped account; "" for a uid from the range
  std::string home;           // $HOME; "" = the task's own sandbox
  bool switch_user = false;   // false: the task runs as the agent's own user

  // "uid 200002 (user alice)", for messages.
  std::string Describe() const;
};

struct TaskUsersOptions {
  // "LO-HI": user N runs as uid LO+N. "" = 200000-299999 when the agent is
  // root; "none" = only users mapped by `accounts` may run tasks.
  std::string uid_range;
  std::vector<std::string> accounts;  // "ringmaster_user=unix_account"
};

class TaskUsers {
 public:
  static constexpr uid_t kDefaultLo = 200000;
  static constexpr uid_t kDefaultHi = 299999;
  static constexpr uid_t kMinUid = 1000;  // below: system accounts

  // Checks the flags against this host's accounts: a range must hold no
  // system uid and no existing account; a mapped account must exist and be
  // neither uid 0 nor in group 0. `agent_uid` is geteuid() but for tests.
  // Errors name the flag.
  static StatusOr<TaskUsers> Create(const TaskUsersOptions& options, uid_t agent_uid = geteuid());

  // Who user `user_id` (named `name`) runs as. Fails, naming the user and the
  // flag, when the user has no uid here.
  StatusOr<TaskIdentity> Resolve(int64_t user_id, const std::string& name) const;

  bool isolating() const { return isolating_; }
  // One line for the agent's start-up log.
  std::string Describe() const;

 private:
  bool isolating_ = false;
  bool has_range_ = false;
  uid_t lo_ = 0, hi_ = 0;
  std::map<std::string, TaskIdentity> accounts_;  // by Ringmaster user name
  TaskIdentity self_;                             // !isolating_: the agent's own user
};

}  // namespace ringmaster::agent
