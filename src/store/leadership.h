// Leadership among servers that share one store (a standby server): a lease
// row in the store names the leader and its epoch. The leader renews the
// lease; a standby takes it once it has expired, moving the epoch on. Every
// write transaction of a server that has set its fence (SetFence) first checks
// the epoch in the same transaction and is refused if it has moved, so an old
// leader that wakes after a pause cannot write anything (fencing). Lease times
// are the store's clock (the database server's), never a server's own.
// Backends that one server alone can use (sqlite, memory) have none:
// MetaStore::leadership() is nullptr. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"

namespace ringmaster::store {

struct LeaseState {
  int64_t epoch = 0;         // moves on at every change of leader; 0 = never held
  std::string holder;        // the leader's id (a server's --server-id, unique per process)
  std::string holder_url;    // where clients reach the leader
  int64_t remaining_ms = 0;  // until the lease expires, by the store's clock; <= 0 = expired
  bool mine = false;         // held by the caller of Acquire (holder == me)
};

class Leadership {
 public:
  virtual ~Leadership() = default;

  // Renews the lease for `lease` if `me` holds it with epoch `epoch`; takes it
  // (epoch + 1) if it is free or expired; else leaves it. Returns the lease as
  // it is after the call (`mine` says whether the caller holds it). One short
  // transaction; its own connection, never queued behind other writes.
  virtual StatusOr<LeaseState> Acquire(const std::string& me, const std::string& my_url, int64_t epoch,
                                       std::chrono::milliseconds lease) = 0;
  // The lease as it stands (who leads, where, for how long).
  virtual StatusOr<LeaseState> Current() = 0;
  // Gives the lease up at once if `me` holds it with `epoch` (a clean stop),
  // so a standby need not wait for it to expire.
  virtual Status Release(const std::string& me, int64_t epoch) = 0;

  // From now on every write transaction of this store object checks that the
  // lease's epoch is still `epoch`, in the transaction, and fails with
  // Unavailable ("not the leader: epoch moved from E to F") if not, writing
  // nothing. 0: writes are refused outright (a standby writes nothing).
  // `on_fenced` runs (once per refusal, on the writer's thread, without the
  // store's locks held) when a write was refused because the epoch moved.
  virtual void SetFence(int64_t epoch) = 0;
  virtual void OnFenced(std::function<void(int64_t seen_epoch)> on_fenced) = 0;
};

}  // namespace ringmaster::store
