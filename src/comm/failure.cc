#include "comm/failure.h"

#include <charconv>

#include <fmt/format.h>

namespace ringmaster::comm {
namespace {

// A note is "<code>|<message>". Anything else (a store others can write to)
// is ignored.
bool ParseNote(const std::string& note, StatusCode* code, std::string* msg) {
  auto bar = note.find('|');
  if (bar == std::string::npos || bar == 0) return false;
  int c = 0;
  auto [end, ec] = std::from_chars(note.data(), note.data() + bar, c);
  if (ec != std::errc() || end != note.data() + bar) return false;
  if (c <= static_cast<int>(StatusCode::kOk) || c > static_cast<int>(StatusCode::kInternal)) return false;
  *code = static_cast<StatusCode>(c);
  *msg = note.substr(bar + 1);
  return !msg->empty();
}

}  // namespace

Failure::Failure(Store* store, std::string self, OnBreak on_break)
    : store_(store), self_(std::move(self)), on_break_(std::move(on_break)) {}

bool Failure::ok() const {
  std::lock_guard<std::mutex> l(mu_);
  return status_.ok();
}

Status Failure::status() const {
  std::lock_guard<std::mutex> l(mu_);
  return status_;
}

Status Failure::Break(const char* op, StatusCode code, const std::string& what, const Relay& relay) {
  return Record(op, code, what, true, relay);
}

Status Failure::Fail(const char* op, StatusCode code, const std::string& what, const Relay& relay) {
  return Record(op, code, what, false, relay);
}

Status Failure::Record(const char* op, StatusCode code, const std::string& what, bool note, const Relay& relay) {
  {
    std::unique_lock<std::mutex> l(mu_);
    // Another thread is recording: its cause wins. Its store calls are bounded.
    cv_.wait_for(l, 4 * kNoteTimeout, [&] { return !recording_; });
    if (!status_.ok()) return status_;
    recording_ = true;
  }
  StatusCode c = code;
  std::string msg = what;
  if (note && store_) {
    auto first = store_->Add("failures", 1, kNoteTimeout);
    if (first.ok() && *first == 1) {
      (void)store_->Set("failure", fmt::format("{}|{}", static_cast<int>(code), what), kNoteTimeout);
    } else if (first.ok()) {
      auto recorded = store_->Get("failure", kNoteTimeout);
      StatusCode rc;
      std::string rm;
      if (recorded.ok() && ParseNote(*recorded, &rc, &rm)) {
        c = rc;
        msg = rm;
      }
    }
  }
  Status st;
  bool first_break = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (status_.ok()) status_ = Status(c, fmt::format("{}: {}", op, msg));
    recording_ = false;
    first_break = !broke_;
    broke_ = true;
    st = status_;
  }
  cv_.notify_all();
  // What peers are told: the group's cause, or for a local failure who failed and why.
  const std::string cause = note ? msg : fmt::format("{} failed: {}", self_, msg);
  if (first_break && relay) relay(c, cause);
  if (first_break && on_break_) on_break_(c, cause);
  return st;
}

void Failure::RequestAbort(const std::string& reason) {
  std::lock_guard<std::mutex> l(mu_);
  if (abort_requested_) return;
  abort_requested_ = true;
  abort_reason_ = reason;
}

bool Failure::AbortRequested(std::string* reason) const {
  std::lock_guard<std::mutex> l(mu_);
  if (abort_requested_ && reason) *reason = abort_reason_;
  return abort_requested_;
}

}  // namespace ringmaster::comm
