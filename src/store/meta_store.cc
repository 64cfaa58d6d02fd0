#include "store/meta_store.h"

#include <algorithm>
#include <cctype>

#include "store/memory/memory_meta_store.h"
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
  return InvalidArgument("metadata store: unknown scheme \"" + scheme + ":\" (expected sqlite:PATH, a path or memory:)");
}

namespace {
std::string AsciiLower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

bool JobFilterSelects(const JobFilter& f, const Job& j) {
  if (f.user_id != 0 && j.user_id != f.user_id) return false;
  if (!f.states.empty() && std::find(f.states.begin(), f.states.end(), j.state) == f.states.end()) return false;
  if (!f.kind.empty() && j.kind != f.kind) return false;
  return f.name.empty() || AsciiLower(j.name).find(AsciiLower(f.name)) != std::string::npos;
}

std::string NameLikePattern(const std::string& substring) {
  std::string out = "%";
  for (char c : AsciiLower(substring)) {
    if (c == '%' || c == '_' || c == '\\') out += '\\';
    out += c;
  }
  return out + "%";
}

const char* RoleName(Role r) { return r == Role::kAdmin ? "admin" : "user"; }

std::optional<Role> ParseRole(const std::string& s) {
  if (s == "admin") return Role::kAdmin;
  if (s == "user") return Role::kUser;
  return std::nullopt;
}

const char* StateName(State s) {
  switch (s) {
    case State::kPending: return "PENDING";
    case State::kScheduled: return "SCHEDULED";
    case State::kRunning: return "RUNNING";
    case State::kSucceeded: return "SUCCEEDED";
    case State::kFailed: return "FAILED";
    case State::kCancelled: return "CANCELLED";
    case State::kLost: return "LOST";
  }
  return "?";
}

std::optional<State> ParseState(const std::string& s) {
  for (State st : {State::kPending, State::kScheduled, State::kRunning, State::kSucceeded,
                   State::kFailed, State::kCancelled, State::kLost}) {
    if (s == StateName(st)) return st;
  }
  return std::nullopt;
}

bool IsTerminal(State s) {
  return s == State::kSucceeded || s == State::kFailed || s == State::kCancelled || s == State::kLost;
}

}  // namespace ringmaster::store
