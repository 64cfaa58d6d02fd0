// The sticky failure of one Context, shared by its collective and point-to-
// point engines: after the first error every operation reports it.
//
// The first rank of a group to fail records the cause in the store
// ("failure"); a rank that fails later reports that recorded cause instead of
// its own neighbour, so every survivor names the same rank. The store may be
// gone with the rank that served it, so each store call is bounded
// (kNoteTimeout) and a rank that cannot reach it reports what it saw itself.
// Breaking then shuts down this rank's links, so ranks waiting on it learn
// at once instead of at their deadline.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "comm/store.h"
#include "common/status.h"

namespace ringmaster::comm {

class Failure {
 public:
  static constexpr std::chrono::milliseconds kNoteTimeout{500};

  // What this rank's links pass on when they break: the group's cause (it
  // names the rank that failed first), so a peer that learns of the failure
  // from this rank names that rank too.
  using OnBreak = std::function<void(StatusCode code, const std::string& cause)>;

  // `store` (may be null: no shared notes) must outlive this. `self` names
  // this rank ("rank 2 (host vm, pid 812)"). `on_break` runs once, when the
  // failure is first recorded: it breaks the links and wakes every engine.
  Failure(Store* store, std::string self, OnBreak on_break);

  bool ok() const;
  Status status() const;

  // Tells peers the group's cause in band before the links break (the
  // collective engine writes a failure notice on each lane, after the frame
  // in flight), so they name the same rank even when the store is gone.
  using Relay = std::function<void(StatusCode code, const std::string& cause)>;

  // Operation `op` failed because of `what` ("rank 2 (host vm, pid 812)
  // died: ..."). Records the group's cause, relays it, breaks the links, and
  // returns the sticky status ("<op>: <cause>"). If another thread is
  // recording a failure, waits for it (bounded) and returns that one.
  Status Break(const char* op, StatusCode code, const std::string& what, const Relay& relay = nullptr);
  // A local failure: sticky and breaks the links, but no store note (the
  // rank was told to stop); peers learn "<self> failed: <what>" from its links.
  Status Fail(const char* op, StatusCode code, const std::string& what, const Relay& relay = nullptr);

  // Abort(): from any thread. The engines turn the request into the sticky
  // "<op>: aborted: <reason>" at their next turn, naming the operation that
  // was running.
  void RequestAbort(const std::string& reason);
  bool AbortRequested(std::string* reason) const;

 private:
  Status Record(const char* op, StatusCode code, const std::string& what, bool note, const Relay& relay);

  Store* const store_;
  const std::string self_;
  const OnBreak on_break_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Status status_;         // GUARDED_BY(mu_)
  bool recording_ = false;  // a thread is writing the store note; GUARDED_BY(mu_)
  bool broke_ = false;      // on_break_ has run; GUARDED_BY(mu_)
  bool abort_requested_ = false;  // GUARDED_BY(mu_)
  std::string abort_reason_;      // GUARDED_BY(mu_)
};

}  // namespace ringmaster::comm
