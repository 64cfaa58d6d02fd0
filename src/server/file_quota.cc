#include "server/file_quota.h"

#include <algorithm>

namespace ringmaster::server {

int64_t EffectiveFileQuota(const store::User& u, int64_t site_default) {
  if (u.file_quota_bytes == kUnlimitedQuota) return 0;
  return u.file_quota_bytes > 0 ? u.file_quota_bytes : std::max<int64_t>(0, site_default);
}

int64_t FileCharge(std::string_view key, uint64_t size, int64_t object_cost) {
  const int64_t levels = static_cast<int64_t>(std::count(key.begin(), key.end(), '/'));
  // users/<name>/x has 2 slashes, jobs/<id>/<kind>/x 3: those levels are the owner's root.
  const int64_t root = key.starts_with("jobs/") ? 3 : 2;
  return static_cast<int64_t>(size) + object_cost * (1 + std::max<int64_t>(0, levels - root));
}

}  // namespace ringmaster::server
