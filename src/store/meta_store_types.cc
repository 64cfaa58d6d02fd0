// What every backend shares of meta_store.h: the names of roles and states,
// and what a job filter selects.
#include <algorithm>
#include <cctype>

#include "store/meta_store.h"

namespace ringmaster::store {

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
