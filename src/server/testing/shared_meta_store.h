// For tests of servers that share one store: SharedMetaStore is one memory
// store with a lease (store::Leadership) on a clock the test controls; each
// server gets its own View, which forwards to the shared store and fences
// its writes by the lease's epoch as a real shared backend does. Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "common/clock.h"
#include "store/meta_store.h"

namespace ringmaster::server::testing {

class SharedMetaStore {
 public:
  explicit SharedMetaStore(Clock* clock);
  // A store for one server, called `name` here: its own fence, the shared
  // data and lease.
  std::shared_ptr<store::MetaStore> View(const std::string& name);
  // The lease as it stands.
  store::LeaseState Lease();
  // View `name`'s lease calls fail with Unavailable (its database connection is cut).
  void Cut(const std::string& name, bool cut);
  // Another server takes the lease now, whatever its state (as after a pause
  // of the holder longer than the lease).
  void Steal(const std::string& holder, const std::string& url, std::chrono::milliseconds lease);
  store::MetaStore& data() { return *data_; }

  // The lease table (what a backend keeps in a row). me "" = read only.
  StatusOr<store::LeaseState> Acquire(const std::string& view, const std::string& me, const std::string& url,
                                      int64_t epoch, std::chrono::milliseconds lease);
  Status Release(const std::string& view, const std::string& me, int64_t epoch);
  int64_t epoch();

 private:
  Clock* const clock_;
  std::unique_ptr<store::MetaStore> data_;
  std::mutex mu_;
  std::set<std::string> cut_;  // GUARDED_BY(mu_)
  int64_t epoch_ = 0;       // GUARDED_BY(mu_)
  std::string holder_, holder_url_;  // GUARDED_BY(mu_)
  int64_t expires_ms_ = 0;  // GUARDED_BY(mu_): clock_->SteadyMs()
};

}  // namespace ringmaster::server::testing
