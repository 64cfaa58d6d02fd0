#include "comm/p2p_engine.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

namespace ringmaster::comm {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr auto kSlice = std::chrono::milliseconds(50);
constexpr auto kLivenessEvery = std::chrono::milliseconds(100);

}  // namespace

P2pEngine::P2pEngine(int rank, int size, const Options& options, std::vector<std::unique_ptr<Pair>> pairs,
                     Failure* failure, std::function<std::string(int)> describe)
    : rank_(rank), size_(size), opt_(options), failure_(failure), describe_(std::move(describe)), pairs_(std::move(pairs)) {
  pairs_.resize(size);
  channels_.resize(size);
  P2pLimits limits{options.p2p_eager_bytes, options.p2p_unexpected_bytes, options.max_io_bytes};
  for (int p = 0; p < size; ++p) {
    if (!pairs_[p]) continue;
    if (!bell_) bell_ = pairs_[p]->doorbell();
    channels_[p] = std::make_unique<P2pChannel>(pairs_[p].get(), limits);
  }
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

P2pEngine::~P2pEngine() {
  Close(/*goodbye=*/false);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void P2pEngine::Wake() {
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  if (bell_) bell_->Ring();
  cv_.notify_all();
}

void P2pEngine::BreakLinks(StatusCode code, const std::string& cause) {
  for (auto& p : pairs_) {
    if (p) p->Fail(code, cause);
  }
  Wake();
}

void P2pEngine::Run(Callbacks& cbs) {
  for (auto& [done, st] : cbs) done(st);
  cbs.clear();
}

void P2pEngine::TakeLocked(const std::vector<P2pRequest*>& reqs, const Status& st, Callbacks* out) {
  for (P2pRequest* r : reqs) {
    auto it = index_.find(r);
    if (it == index_.end()) continue;
    out->emplace_back(std::move(it->second->done), st);
    entries_.erase(it->second);
    index_.erase(it);
  }
  if (entries_.empty()) cv_.notify_all();
}

void P2pEngine::FailAllLocked(const Status& st, Callbacks* out) {
  for (auto& ch : channels_) {
    if (ch) (void)ch->TakePending();
  }
  for (auto& e : entries_) out->emplace_back(std::move(e.done), st);
  entries_.clear();
  index_.clear();
  cv_.notify_all();
}

void P2pEngine::Post(bool send, int peer, int64_t tag, char* data, size_t len, Done done) {
  Callbacks cbs;
  StatusCode code = StatusCode::kOk;
  std::string what;
  Done refused;  // decided once the failure is recorded
  const char* op = send ? "send" : "recv";
  {
    std::lock_guard<std::mutex> l(mu_);
    std::string reason;
    if (!failure_->ok() || stop_) {
      cbs.emplace_back(std::move(done), stop_ && failure_->ok() ? Aborted(fmt::format("{}: the context is closing", op))
                                                                : failure_->status());
    } else if (failure_->AbortRequested(&reason)) {
      cbs.emplace_back(std::move(done), failure_->Fail(op, StatusCode::kAborted, "aborted: " + reason));
    } else if (!channels_[peer]) {
      cbs.emplace_back(std::move(done), Internal(fmt::format("{}: no point-to-point link to {}", op, describe_(peer))));
    } else if (send && channels_[peer]->left()) {
      code = StatusCode::kUnavailable;
      what = fmt::format("{} left the group before this rank sent to it", describe_(peer));
      refused = std::move(done);
    } else {
      entries_.push_back({P2pRequest{send, peer, tag, data, len, SteadyClock::now() + opt_.timeout}, std::move(done)});
      P2pRequest* r = &entries_.back().req;
      index_[r] = std::prev(entries_.end());
      if (send) {
        channels_[peer]->PostSend(r);
      } else {
        std::vector<P2pRequest*> completed;
        Status st = channels_[peer]->PostRecv(r, &completed);
        if (!st.ok()) {
          code = st.code();
          what = fmt::format("{} {}", describe_(peer), st.message());
        }
        TakeLocked(completed, Status::Ok(), &cbs);
      }
      if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
    }
  }
  if (code != StatusCode::kOk) {
    Status st = failure_->Break(op, code, what);
    if (refused) cbs.emplace_back(std::move(refused), st);
    std::lock_guard<std::mutex> l(mu_);
    FailAllLocked(st, &cbs);
  }
  Wake();
  Run(cbs);
}

void P2pEngine::Loop() {
  Callbacks cbs;
  while (true) {
    uint32_t bell = bell_ ? bell_->Read() : 0;
    bool moved = false;
    StatusCode code = StatusCode::kOk;
    std::string what;
    const char* op = "recv";
    std::vector<pollfd> fds;
    bool bell_pending = false;
    auto wake_at = SteadyClock::now() + kSlice;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !entries_.empty(); });
      if (stop_) return;
      std::string reason;
      if (!failure_->ok()) {
        FailAllLocked(failure_->status(), &cbs);
      } else if (failure_->AbortRequested(&reason)) {
        const char* aop = entries_.front().req.op();
        l.unlock();
        Status st = failure_->Fail(aop, StatusCode::kAborted, "aborted: " + reason);
        l.lock();
        FailAllLocked(st, &cbs);
      } else {
        for (int p = 0; p < size_ && code == StatusCode::kOk; ++p) {
          P2pChannel* ch = channels_[p].get();
          if (!ch || (!ch->Pending() && !ch->WantsWrite())) continue;
          std::vector<P2pRequest*> completed;
          Status st = ch->Progress(&moved, &completed);
          TakeLocked(completed, Status::Ok(), &cbs);
          if (!st.ok()) {
            code = st.code();
            what = fmt::format("{} {}", describe_(p), st.message());
            for (const auto& e : entries_) {
              if (e.req.peer == p) {
                op = e.req.op();
                break;
              }
            }
          }
        }
        const auto now = SteadyClock::now();
        for (const auto& e : entries_) {
          if (code != StatusCode::kOk) break;
          if (now >= e.req.deadline) {
            code = StatusCode::kDeadlineExceeded;
            op = e.req.op();
            what = fmt::format("timed out after {:.1f} s waiting for {} ({})", opt_.timeout.count() / 1000.0,
                               describe_(e.req.peer), TagName(e.req.tag));
          }
          wake_at = std::min(wake_at, e.req.deadline);
        }
        // Peers without a descriptor (shared memory): their flags and process.
        if (code == StatusCode::kOk && !moved && now - last_liveness_check_ >= kLivenessEvery) {
          last_liveness_check_ = now;
          for (int p = 0; p < size_ && code == StatusCode::kOk; ++p) {
            P2pChannel* ch = channels_[p].get();
            if (!ch || pairs_[p]->fd() >= 0 || !ch->Pending()) continue;
            const PeerState state = pairs_[p]->State();
            if (state == PeerState::kAlive) continue;
            // What it sent before it went is read first.
            std::vector<P2pRequest*> completed;
            Status st = ch->Progress(&moved, &completed);
            TakeLocked(completed, Status::Ok(), &cbs);
            if (!st.ok()) {
              code = st.code();
              what = fmt::format("{} {}", describe_(p), st.message());
            } else if (!moved && ch->Pending()) {
              code = StatusCode::kUnavailable;
              StatusCode their_code;
              std::string cause;
              if (state == PeerState::kBroken && pairs_[p]->PeerFailure(&their_code, &cause)) {
                code = their_code;
                what = cause;  // the peer failed first and said why: that cause, as the group's
              } else {
                what = state == PeerState::kGone ? fmt::format("{} died: its process is gone", describe_(p))
                     : state == PeerState::kBroken ? fmt::format("{} failed", describe_(p))
                                                   : fmt::format("{} left the group while this rank still needed it",
                                                                 describe_(p));
              }
            }
          }
        }
        for (int p = 0; p < size_; ++p) {
          P2pChannel* ch = channels_[p].get();
          if (!ch || (!ch->Pending() && !ch->WantsWrite())) continue;
          int fd = pairs_[p]->fd();
          if (fd < 0) {
            bell_pending = true;
            continue;
          }
          fds.push_back({fd, static_cast<short>(POLLIN | POLLRDHUP | (ch->WantsWrite() ? POLLOUT : 0)), 0});
        }
      }
    }
    Run(cbs);
    if (code != StatusCode::kOk) {
      Status st = failure_->Break(op, code, what);
      {
        std::lock_guard<std::mutex> l(mu_);
        FailAllLocked(st, &cbs);
      }
      Run(cbs);
      continue;
    }
    if (moved) continue;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake_at - SteadyClock::now());
    ms = std::clamp(ms + std::chrono::milliseconds(1), std::chrono::milliseconds(1), std::chrono::milliseconds(kSlice));
    if (bell_pending && fds.empty() && bell_) {
      bell_->Wait(bell, ms);
      continue;
    }
    fds.push_back({wake_fd_, POLLIN, 0});
    if (poll(fds.data(), fds.size(), bell_pending ? 1 : static_cast<int>(ms.count())) > 0 && (fds.back().revents & POLLIN)) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof v);
    }
  }
}

void P2pEngine::Drain(SteadyClock::time_point deadline, const std::string& reason) {
  std::unique_lock<std::mutex> l(mu_);
  if (cv_.wait_until(l, deadline, [&] { return entries_.empty(); })) return;
  l.unlock();
  failure_->RequestAbort(reason);
  Wake();
  l.lock();
  cv_.wait_for(l, std::chrono::seconds(1), [&] { return entries_.empty(); });
}

void P2pEngine::Close(bool goodbye) {
  Callbacks cbs;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> l(mu_);
    FailAllLocked(Aborted("the context was destroyed with this message pending"), &cbs);
    if (goodbye && failure_->ok()) {
      for (int p = 0; p < size_; ++p) {
        if (!channels_[p]) continue;
        (void)channels_[p]->SayGoodbye();
        pairs_[p]->Shutdown(/*clean=*/true);
      }
    }
  }
  Run(cbs);
}

}  // namespace ringmaster::comm
