// Status and StatusOr<T>: the error currency across component boundaries.
// About ten general codes (after leveldb/absl); exceptions never cross a
// component boundary. Value types; safe to copy between threads.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace ringmaster {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kUnauthenticated,
  kFailedPrecondition,
  kResourceExhausted,
  kUnavailable,
  kDeadlineExceeded,
  kAborted,
  kInternal,
  // A write refused because the disk is full (ENOSPC, EDQUOT, SQLITE_FULL):
  // nothing of it was kept, and the same request succeeds once space is freed.
  kInsufficientStorage,
  // Stored data is damaged (a corrupt database page or row): the answer names
  // what, and never serves the damaged data as if it were sound.
  kDataLoss,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NotFound: job 12 does not exist"
  std::string ToString() const;

  // Prefixes the message with context: "loading spec: " + message.
  Status Annotate(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status Unauthenticated(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status InsufficientStorage(std::string m) { return {StatusCode::kInsufficientStorage, std::move(m)}; }
// What a server answers a write that found its disk full: `what` failed.
inline Status ServerDiskFull(const std::string& what) {
  return InsufficientStorage("the server's disk is full (" + what + "): nothing was stored; try again later");
}

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }
  StatusOr(T value) : v_(std::move(value)) {}

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  // REQUIRES: ok()
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

#define RM_CONCAT_INNER(a, b) a##b
#define RM_CONCAT(a, b) RM_CONCAT_INNER(a, b)

#define RM_RETURN_IF_ERROR(expr)                  \
  do {                                            \
    ::ringmaster::Status rm_status_ = (expr);     \
    if (!rm_status_.ok()) return rm_status_;      \
  } while (0)

#define RM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

#define RM_ASSIGN_OR_RETURN(lhs, expr) \
  RM_ASSIGN_OR_RETURN_IMPL(RM_CONCAT(rm_statusor_, __LINE__), lhs, expr)

}  // namespace ringmaster
