// Opening the PostgreSQL MetaStore (what OpenMetaStore calls for
// postgres:// URLs), without libpq's headers. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "store/meta_store.h"

namespace ringmaster::store::postgres {

// Opens the database `url` names ("postgres://..." or "postgresql://...")
// and applies pending migrations (under an advisory lock: one server of
// several starting together migrates, the others wait).
StatusOr<std::unique_ptr<MetaStore>> Open(const std::string& url);

// The printable forms of a store URL (ParseUrl's ConnInfo::redacted, tool_url).
struct UrlForms {
  std::string redacted;
  std::string tool_url;
};
StatusOr<UrlForms> PrintableUrl(const std::string& url);

}  // namespace ringmaster::store::postgres
