// What a user may ask of the scheduler and the nodes beyond the defaults: a
// job priority up to their maximum, and the host's network. Admins grant
// them per user (PATCH /api/v1/users/{name}); admins hold both in full.
// Pure functions of a store::User: thread-safe.
#pragma once

#include <string>

#include "common/status.h"
#include "protocol/job_spec.h"
#include "store/meta_store.h"

namespace ringmaster::server {

// The highest priority the user's jobs may ask for (admins: kMaxPriority).
int MaxPriority(const store::User& user);
// Whether the user's jobs may ask for `network: host` (admins: yes).
bool MayUseHostNetwork(const store::User& user);

// PermissionDenied naming the field (`priority`, `network`) when the spec
// asks for more than the user was granted.
Status CheckJobPrivileges(const store::User& user, const protocol::JobSpec& spec);

}  // namespace ringmaster::server
