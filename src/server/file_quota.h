// What a user's file costs their quota, and which quota applies: the rule the
// files API, the log archiver and reconcile all count by (docs/files.md,
// "Quotas"). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include "store/meta_store.h"

namespace ringmaster::server {

// A stored quota of kUnlimitedQuota is an admin's explicit "no quota"; 0 is
// "the site default" (what every user has until an admin sets one).
inline constexpr int64_t kUnlimitedQuota = -1;

// The quota that applies to `u`: its own, else `site_default`; 0 = none.
int64_t EffectiveFileQuota(const store::User& u, int64_t site_default);

// What an object of `size` bytes at `key` is charged: its bytes, plus
// `object_cost` for the object and `object_cost` again for each directory
// level below its owner's root (users/<name>/ or jobs/<id>/<kind>/), so that
// empty files and deep keys are not free.
int64_t FileCharge(std::string_view key, uint64_t size, int64_t object_cost);

}  // namespace ringmaster::server
