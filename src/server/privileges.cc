#include "server/privileges.h"

#include <fmt/format.h>

namespace ringmaster::server {

int MaxPriority(const store::User& user) {
  return user.role == store::Role::kAdmin ? protocol::kMaxPriority : user.max_priority;
}

bool MayUseHostNetwork(const store::User& user) { return user.role == store::Role::kAdmin || user.host_network; }

Status CheckJobPrivileges(const store::User& user, const protocol::JobSpec& spec) {
  if (const int max = MaxPriority(user); spec.priority > max) {
    return PermissionDenied(fmt::format(
        "priority: {} is above the maximum of user {}, {}; ask an admin to raise it "
        "(ringmaster users set {} --max-priority N)",
        spec.priority, user.name, max, user.name));
  }
  if (spec.network == "host" && !MayUseHostNetwork(user)) {
    return PermissionDenied(fmt::format(
        "network: host shares the node's network with other users' jobs, and user {} may not use it; ask an "
        "admin (ringmaster users set {} --host-network yes), or leave network out",
        user.name, user.name));
  }
  return Status::Ok();
}

}  // namespace ringmaster::server
