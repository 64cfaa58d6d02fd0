#include "store/meta_store.h"

#include <cctype>

#include "store/memory/memory_meta_store.h"
#include "store/postgres/open.h"
#include "store/sqlite/sqlite_meta_store.h"

namespace ringmaster::store {
namespace {

// The backends by URL scheme. A new backend adds its folder and a line here.
struct Backend {
  const char* scheme;
  StatusOr<std::unique_ptr<MetaStore>> (*open)(const std::string& rest);
};
constexpr Backend kBackends[] = {
    {"sqlite", [](const std::string& path) { return sqlite::Open(path); }},
    {"postgres", [](const std::string& rest) { return postgres::Open("postgres:" + rest); }},
    {"postgresql", [](const std::string& rest) { return postgres::Open("postgresql:" + rest); }},
    {"memory", [](const std::string& rest) -> StatusOr<std::unique_ptr<MetaStore>> {
       if (!rest.empty()) return InvalidArgument("metadata store: \"memory:\" takes nothing after the colon");
       return memory::NewMemoryMetaStore();
     }},
};

}  // namespace

StatusOr<std::unique_ptr<MetaStore>> OpenMetaStore(const std::string& url) {
  // A scheme is letters before the first ':'; anything else is a path, which
  // keeps meaning an SQLite database (what configs and flags passed before).
  size_t colon = url.find(':');
  bool has_scheme = colon != std::string::npos && colon > 0;
  for (size_t i = 0; has_scheme && i < colon; ++i) has_scheme = std::islower(static_cast<unsigned char>(url[i]));
  if (!has_scheme) {
    if (url.empty()) return InvalidArgument("metadata store: expected sqlite:PATH, a path or memory:; got \"\"");
    return sqlite::Open(url);
  }
  const std::string scheme = url.substr(0, colon);
  for (const Backend& b : kBackends) {
    if (scheme == b.scheme) return b.open(url.substr(colon + 1));
  }
  return InvalidArgument("metadata store: unknown scheme \"" + scheme + ":\" (expected sqlite:PATH, a path, postgres://... or memory:)");
}

namespace {
bool IsPostgresUrl(const std::string& url) {
  return url.rfind("postgres://", 0) == 0 || url.rfind("postgresql://", 0) == 0;
}
}  // namespace

std::string RedactedStoreUrl(const std::string& url) {
  if (!IsPostgresUrl(url)) return url;
  auto info = postgres::PrintableUrl(url);
  // A URL that does not parse may hold a password anywhere: none of it is shown.
  return info.ok() ? info->redacted : url.substr(0, url.find("://") + 3) + "***";
}

StatusOr<std::string> PostgresToolUrl(const std::string& url) {
  if (!IsPostgresUrl(url)) return InvalidArgument("not a PostgreSQL URL (postgres://...)");
  RM_ASSIGN_OR_RETURN(postgres::UrlForms forms, postgres::PrintableUrl(url));
  return forms.tool_url;
}

}  // namespace ringmaster::store
