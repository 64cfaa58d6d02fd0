// Election: which of the servers sharing one store leads (store::Leadership).
// A standby tries to take the lease every retry interval; the leader renews it
// every renew interval and steps down the moment it is refused, a write is
// fenced, or no renewal succeeded within the lease by its own steady clock.
// Thread-safe; Step() is the loop's body, callable directly by tests.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/status.h"
#include "store/leadership.h"

namespace ringmaster::server {

enum class ServerRole { kStandby, kLeader, kSteppedDown };
const char* RoleName(ServerRole role);

struct ElectionOptions {
  std::string id;   // this process, unique among the servers (--server-id)
  std::string url;  // where clients reach it (--advertise-url)
  std::chrono::milliseconds lease{10'000};
  std::chrono::milliseconds renew{2'000};
  std::chrono::milliseconds retry{1'000};
  // A standby's check of the leader it stands by, at every try: an error
  // withdraws it from the election for good (on_lost runs with the message).
  std::function<Status(const store::LeaseState& leader)> may_follow;
};

struct ElectionView {
  ServerRole role = ServerRole::kStandby;
  std::string leader_url;  // "" = no leader known
  int64_t epoch = 0;       // the leader's epoch as last seen
};

class Election {
 public:
  // on_won(epoch) runs on the election's thread after the fence is set to
  // `epoch`: the new leader starts its services; an error steps it down.
  // on_lost(why) runs once, when it stops leading (on whichever thread saw it).
  Election(store::Leadership* leadership, Clock* clock, ElectionOptions options,
           std::function<Status(int64_t epoch)> on_won, std::function<void(const std::string& why)> on_lost);
  ~Election();

  // Sets the fence to 0 (a standby writes nothing) and starts the loop.
  void Start();
  // Ends the loop; a leader releases the lease so a standby need not wait.
  void Stop();
  // One round: a standby tries to take the lease, a leader renews it.
  void Step();
  // The leader steps down now (a write was fenced, a service failed).
  void Lose(const std::string& why);

  ElectionView View() const;
  // When the loop's next Step is due.
  std::chrono::milliseconds Interval() const;

 private:
  store::Leadership* const leadership_;
  Clock* const clock_;
  const ElectionOptions options_;
  const std::function<Status(int64_t)> on_won_;
  const std::function<void(const std::string&)> on_lost_;

  mutable std::mutex mu_;
  ElectionView view_;             // GUARDED_BY(mu_)
  int64_t renewed_steady_ms_ = 0;  // GUARDED_BY(mu_): when the last successful renewal was sent
  bool stopping_ = false;          // GUARDED_BY(mu_)
  std::condition_variable cv_;
  std::thread loop_;
};

}  // namespace ringmaster::server
