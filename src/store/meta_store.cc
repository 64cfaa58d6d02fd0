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

}  // namespace ringmaster::store
