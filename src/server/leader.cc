#include "server/leader.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/thread_name.h"

namespace ringmaster::server {

const char* RoleName(ServerRole role) {
  switch (role) {
    case ServerRole::kLeader:
      return "leader";
    case ServerRole::kStandby:
      return "standby";
    case ServerRole::kSteppedDown:
      return "stepped-down";
  }
  return "?";
}

Election::Election(store::Leadership* leadership, Clock* clock, ElectionOptions options,
                   std::function<Status(int64_t)> on_won, std::function<void(const std::string&)> on_lost)
    : leadership_(leadership),
      clock_(clock),
      options_(std::move(options)),
      on_won_(std::move(on_won)),
      on_lost_(std::move(on_lost)) {}

Election::~Election() { Stop(); }

void Election::Start() {
  leadership_->SetFence(0);
  loop_ = std::thread([this] {
    NameThisThread("server-leader");
    std::unique_lock<std::mutex> l(mu_);
    while (!stopping_ && view_.role != ServerRole::kSteppedDown) {
      l.unlock();
      Step();
      l.lock();
      cv_.wait_for(l, view_.role == ServerRole::kLeader ? options_.renew : options_.retry);
    }
  });
}

void Election::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (loop_.joinable()) loop_.join();
  ElectionView v = View();
  if (v.role == ServerRole::kLeader) {
    if (Status st = leadership_->Release(options_.id, v.epoch); !st.ok()) {
      spdlog::warn("leadership: releasing the lease: {}", st.message());
    }
    std::lock_guard<std::mutex> l(mu_);
    view_.role = ServerRole::kSteppedDown;
  }
}

std::chrono::milliseconds Election::Interval() const {
  std::lock_guard<std::mutex> l(mu_);
  return view_.role == ServerRole::kLeader ? options_.renew : options_.retry;
}

ElectionView Election::View() const {
  std::lock_guard<std::mutex> l(mu_);
  return view_;
}

void Election::Lose(const std::string& why) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (view_.role != ServerRole::kLeader) return;
    view_.role = ServerRole::kSteppedDown;
    view_.leader_url.clear();
  }
  // Writes stop at once, whatever the store's view of the epoch.
  leadership_->SetFence(0);
  spdlog::error("leadership: stepping down: {}", why);
  cv_.notify_all();
  if (on_lost_) on_lost_(why);
}

void Election::Step() {
  const ElectionView v = View();
  if (v.role == ServerRole::kSteppedDown) return;
  const int64_t sent = clock_->SteadyMs();
  // A leader steps down a renewal's interval before its lease could have run
  // out in the database: the lease was taken no earlier than the renewal was
  // sent, and a renewal's answer may take that long. (A leader that was
  // paused finds out here, before it does anything else.)
  const int64_t margin_ms = options_.lease.count() - options_.renew.count();
  if (v.role == ServerRole::kLeader) {
    int64_t renewed;
    {
      std::lock_guard<std::mutex> l(mu_);
      renewed = renewed_steady_ms_;
    }
    if (sent - renewed >= margin_ms) {
      return Lose(fmt::format("the lease was not renewed for {} ms", sent - renewed));
    }
  }
  auto lease = leadership_->Acquire(options_.id, options_.url, v.role == ServerRole::kLeader ? v.epoch : 0, options_.lease);
  if (v.role == ServerRole::kLeader) {
    if (lease.ok() && lease->mine && lease->epoch == v.epoch) {
      std::lock_guard<std::mutex> l(mu_);
      renewed_steady_ms_ = sent;
      return;
    }
    if (lease.ok()) {
      return Lose(fmt::format("the lease went to {} (epoch {})", lease->holder, lease->epoch));
    }
    int64_t renewed;
    {
      std::lock_guard<std::mutex> l(mu_);
      renewed = renewed_steady_ms_;
    }
    spdlog::warn("leadership: renewing the lease: {}", lease.status().message());
    if (clock_->SteadyMs() - renewed >= margin_ms) {
      Lose(fmt::format("the lease was not renewed for {} ms: {}", clock_->SteadyMs() - renewed,
                       lease.status().message()));
    }
    return;
  }
  if (!lease.ok()) {
    spdlog::warn("leadership: reading the lease: {}", lease.status().message());
    return;
  }
  if (!lease->mine) {
    {
      std::lock_guard<std::mutex> l(mu_);
      view_.leader_url = lease->remaining_ms > 0 ? lease->holder_url : "";
      view_.epoch = lease->epoch;
    }
    if (options_.may_follow && lease->remaining_ms > 0) {
      if (Status st = options_.may_follow(*lease); !st.ok()) {
        {
          std::lock_guard<std::mutex> l(mu_);
          view_.role = ServerRole::kSteppedDown;
          view_.leader_url.clear();
        }
        spdlog::error("leadership: withdrawing from the election: {}", st.message());
        cv_.notify_all();
        if (on_lost_) on_lost_(st.message());
      }
    }
    return;
  }
  // Won: fence the store's writes to this epoch before anything is written.
  leadership_->SetFence(lease->epoch);
  {
    std::lock_guard<std::mutex> l(mu_);
    renewed_steady_ms_ = sent;
    view_.epoch = lease->epoch;
  }
  spdlog::info("leadership: this server ({}) leads from epoch {}", options_.id, lease->epoch);
  Status st = on_won_ ? on_won_(lease->epoch) : Status::Ok();
  {
    std::lock_guard<std::mutex> l(mu_);
    view_.role = ServerRole::kLeader;
    view_.leader_url = options_.url;
  }
  if (!st.ok()) Lose("starting the leader's services: " + st.message());
}

}  // namespace ringmaster::server
