#include "comm/progress_engine.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace ringmaster::comm {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr size_t kStripeMin = 256 << 10;  // messages at least this big are striped across streams
constexpr int kSpinYields = 200;          // doorbell polls before a shm wait sleeps
constexpr auto kLivenessEvery = std::chrono::milliseconds(100);
// How long a failing rank keeps its links open to deliver its failure
// notice where a frame is half sent and the peer has not yet read enough to
// make room: its peers name the cause, not this rank, if they read by then.
// As long as a store note may take (Failure::kNoteTimeout).
constexpr auto kNoticeLinger = std::chrono::milliseconds(500);
constexpr auto kNoticeSlice = std::chrono::milliseconds(5);

// Reads what of `n` bytes is there now; returns how many it got. `lost`
// (optional) is set when the link has failed: no more bytes will come.
size_t ReadNow(Pair& pair, void* buf, size_t n, bool* lost = nullptr) {
  size_t got = 0;
  while (got < n) {
    iovec iov{static_cast<char*>(buf) + got, n - got};
    auto r = pair.TryRead(&iov, 1);
    if (!r.ok() && lost) *lost = true;
    if (!r.ok() || *r == 0) break;
    got += *r;
  }
  return got;
}

}  // namespace

bool Engine::Msg::Complete() const {
  return std::all_of(parts.begin(), parts.end(), [](const Part& p) { return p.complete; });
}

Engine::Engine(int rank, int size, const Options& options, std::vector<std::vector<std::unique_ptr<Pair>>> lanes,
               Failure* failure, std::function<std::string(int)> describe)
    : rank_(rank), size_(size), opt_(options), lanes_(size), failure_(failure), describe_(std::move(describe)) {
  for (int p = 0; p < size && p < static_cast<int>(lanes.size()); ++p) {
    for (auto& pair : lanes[p]) {
      if (pair && !bell_) bell_ = pair->doorbell();
      lanes_[p].emplace_back();
      lanes_[p].back().pair = std::move(pair);
    }
  }
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

Engine::~Engine() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

Status Engine::Begin(const char* name) {
  if (!failure_->ok()) return failure_->status();
  op_ = name;
  std::string reason;
  if (failure_->AbortRequested(&reason)) return FailHere(StatusCode::kAborted, "aborted: " + reason);
  deadline_ = SteadyClock::now() + opt_.timeout;
  return Status::Ok();
}

void Engine::End() {
  // A failed operation may leave parts queued on lanes: the context is broken then, and nothing moves again.
  for (auto& ls : lanes_) {
    for (Lane& lane : ls) {
      lane.sends.clear();
      lane.recvs.clear();
    }
  }
  msgs_.clear();
}

void Engine::Wake() {
  poked_.store(true);
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  if (bell_) bell_->Ring();
}

void Engine::BreakLinks(StatusCode code, const std::string& cause) {
  for (auto& ls : lanes_) {
    for (Lane& lane : ls) {
      if (lane.pair) lane.pair->Fail(code, cause);
    }
  }
  Wake();
}

Status Engine::LinkLost(int peer, Lane& lane, const std::string& how) {
  FrameHeader h{};
  if (SkipToNotice(lane, &h)) return Adopt(peer, lane, h);
  StatusCode code;
  std::string cause;
  if (lane.pair->PeerFailure(&code, &cause)) return Break(code, cause);
  return Break(StatusCode::kUnavailable, fmt::format("{} died: {}", Describe(peer), how));
}

bool Engine::SkipToNotice(Lane& lane, FrameHeader* h) {
  // The operation has failed: what the frames carry no longer matters, only
  // whether the peer's notice follows them.
  char sink[16 << 10];
  uint64_t skip = 0;
  if (!lane.recvs.empty() && lane.recvs.front()->hdr_done > 0) {
    Part* p = lane.recvs.front();
    if (p->hdr_done == sizeof(FrameHeader)) {
      skip = p->len - p->done;  // its header was checked: the frame is the one expected
    } else {
      const size_t need = sizeof(FrameHeader) - p->hdr_done;
      if (ReadNow(*lane.pair, reinterpret_cast<char*>(&p->got) + p->hdr_done, need) < need) return false;
      p->hdr_done = sizeof(FrameHeader);
      *h = p->got;
      if (h->magic == kFailMagic) return true;
      if (h->magic != kFrameMagic) return false;
      skip = h->len;
    }
  }
  while (true) {
    while (skip > 0) {
      iovec iov{sink, std::min<uint64_t>(skip, sizeof sink)};
      auto r = lane.pair->TryRead(&iov, 1);
      if (!r.ok() || *r == 0) return false;
      skip -= *r;
    }
    if (lane.pair->Peek(h, sizeof *h) != sizeof *h || (h->magic != kFailMagic && h->magic != kFrameMagic)) return false;
    if (ReadNow(*lane.pair, h, sizeof *h) < sizeof *h) return false;
    if (h->magic == kFailMagic) return true;
    skip = h->len;
  }
}

void Engine::SayGoodbye() {
  if (!failure_->ok()) return;
  FrameHeader bye{kByeMagic, 0, 0};
  for (auto& ls : lanes_) {
    for (Lane& lane : ls) {
      if (!lane.pair) continue;
      iovec iov{&bye, sizeof bye};
      (void)lane.pair->TryWrite(&iov, 1);
      lane.pair->Shutdown(/*clean=*/true);
    }
  }
}

Status Engine::Break(StatusCode code, const std::string& what) {
  return failure_->Break(op_, code, what, [this](StatusCode c, const std::string& cause) { SendFailNotices(c, cause); });
}

Status Engine::FailHere(StatusCode code, const std::string& what) {
  return failure_->Fail(op_, code, what, [this](StatusCode c, const std::string& cause) { SendFailNotices(c, cause); });
}

void Engine::SendFailNotices(StatusCode code, const std::string& cause) {
  const std::string note = cause.substr(0, kMaxFailNote);
  if (note.empty()) return;
  const FrameHeader h{kFailMagic, static_cast<uint32_t>(code), note.size()};
  // What each lane still owes its peer: the rest of a frame it is in the
  // middle of (a notice inside it would corrupt the stream), then the notice.
  std::vector<Owed> owed;
  for (auto& ls : lanes_) {
    for (Lane& lane : ls) {
      if (!lane.pair || lane.left || lane.pair->State() != PeerState::kAlive) continue;
      Part* half = (!lane.sends.empty() && lane.sends.front()->hdr_done > 0) ? lane.sends.front() : nullptr;
      owed.push_back({&lane, half, 0});
    }
  }
  // A peer that is slow to read (late to the operation, or descheduled) still
  // gets the cause: the links stay open until it has read, for a while.
  const auto give_up = SteadyClock::now() + kNoticeLinger;
  std::vector<char> sink;
  while (true) {
    const uint32_t bell = Bell();
    std::erase_if(owed, [&](Owed& o) { return Repay(o, h, note); });
    if (owed.empty() || SteadyClock::now() >= give_up) return;
    // A peer failing at the same moment lingers too: read what it sends, or
    // each would wait for the other to make room.
    sink.resize(64 << 10);
    for (auto& ls : lanes_) {
      for (Lane& lane : ls) {
        if (lane.pair) (void)ReadNow(*lane.pair, sink.data(), sink.size());
      }
    }
    std::vector<pollfd> fds;
    bool bells = false;
    for (const Owed& o : owed) {
      if (o.lane->pair->fd() >= 0) {
        fds.push_back({o.lane->pair->fd(), POLLOUT, 0});
      } else {
        bells = true;
      }
    }
    if (!fds.empty()) {
      (void)poll(fds.data(), fds.size(), bells ? 1 : static_cast<int>(kNoticeSlice.count()));
    } else if (bell_) {
      bell_->Wait(bell, kNoticeSlice);
    }
  }
}

bool Engine::Repay(Owed& o, const FrameHeader& h, const std::string& note) {
  Pair& pair = *o.lane->pair;
  while (Part* p = o.half) {
    iovec rest[2];
    int n = 0;
    if (p->hdr_done < sizeof(FrameHeader)) {
      rest[n++] = {reinterpret_cast<char*>(&p->hdr) + p->hdr_done, sizeof(FrameHeader) - p->hdr_done};
    }
    if (p->done < p->len) rest[n++] = {p->data + p->done, p->len - p->done};
    if (n == 0) {
      o.half = nullptr;
      break;
    }
    auto w = pair.TryWrite(rest, n);
    if (!w.ok()) return true;  // the peer is gone: nothing more to tell it
    if (*w == 0) return false;
    size_t hb = std::min(*w, sizeof(FrameHeader) - p->hdr_done);
    p->hdr_done += hb;
    p->done += *w - hb;
  }
  // The notice may go in pieces: the reader waits for the rest (Adopt).
  while (o.notice_done < sizeof h + note.size()) {
    iovec iov[2];
    int n = 0;
    if (o.notice_done < sizeof h) {
      iov[n++] = {const_cast<char*>(reinterpret_cast<const char*>(&h)) + o.notice_done, sizeof h - o.notice_done};
    }
    const size_t note_done = o.notice_done > sizeof h ? o.notice_done - sizeof h : 0;
    iov[n++] = {const_cast<char*>(note.data()) + note_done, note.size() - note_done};
    auto w = pair.TryWrite(iov, n);
    if (!w.ok()) return true;
    if (*w == 0) return false;
    o.notice_done += *w;
  }
  return true;
}

Status Engine::Adopt(int peer, Lane& lane, const FrameHeader& h) {
  if (Status st = CheckFailNotice(h); !st.ok()) {
    return Break(StatusCode::kInternal, fmt::format("{} {}", Describe(peer), st.message()));
  }
  // A notice may arrive in pieces while its sender lingers for room; once
  // its links are broken, what is not there is lost.
  std::string note(h.len, '\0');
  size_t got = 0;
  const auto give_up = SteadyClock::now() + kNoticeLinger;
  while (true) {
    const uint32_t bell = Bell();
    bool lost = false;
    got += ReadNow(*lane.pair, note.data() + got, note.size() - got, &lost);
    if (got == note.size() || lost || SteadyClock::now() >= give_up) break;
    if (lane.pair->fd() >= 0) {
      pollfd pfd{lane.pair->fd(), POLLIN, 0};
      (void)poll(&pfd, 1, static_cast<int>(kNoticeSlice.count()));
    } else if (bell_) {
      bell_->Wait(bell, kNoticeSlice);
    }
  }
  if (got < note.size()) return Break(StatusCode::kUnavailable, fmt::format("{} failed", Describe(peer)));
  for (char& ch : note) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';  // it goes into logs as it is
  }
  return Break(static_cast<StatusCode>(h.seq), note);
}

// ---- messaging

Engine::Msg* Engine::Post(int peer, bool send, char* data, size_t len) {
  Msg& m = msgs_.emplace_back();
  auto& ls = lanes_[peer];
  size_t stripes = (ls.size() > 1 && len >= kStripeMin) ? ls.size() : 1;
  m.parts.resize(stripes);
  for (size_t s = 0; s < stripes; ++s) {
    Part& p = m.parts[s];
    size_t begin = len * s / stripes, end = len * (s + 1) / stripes;
    p.data = data + begin;
    p.len = end - begin;
    Lane& lane = ls[s];
    p.hdr = {kFrameMagic, send ? lane.send_seq++ : lane.recv_seq++, p.len};
    (send ? lane.sends : lane.recvs).push_back(&p);
  }
  return &m;
}

Status Engine::ProgressSend(int peer, Lane& lane, bool* moved) {
  while (!lane.sends.empty()) {
    Part* p = lane.sends.front();
    iovec iov[2];
    int n = 0;
    if (p->hdr_done < sizeof(FrameHeader)) {
      iov[n++] = {reinterpret_cast<char*>(&p->hdr) + p->hdr_done, sizeof(FrameHeader) - p->hdr_done};
    }
    if (p->len > p->done) iov[n++] = {p->data + p->done, p->len - p->done};
    auto w = lane.pair->TryWrite(iov, CapIov(iov, n, opt_.max_io_bytes));
    if (!w.ok() && lane.left) {
      return Break(StatusCode::kUnavailable, fmt::format("{} left the group while this rank still needed it", Describe(peer)));
    }
    if (!w.ok()) return LinkLost(peer, lane, w.status().message());
    size_t got = *w;
    if (got == 0) return Status::Ok();
    *moved = true;
    size_t h = std::min(got, sizeof(FrameHeader) - p->hdr_done);
    p->hdr_done += h;
    p->done += got - h;
    if (p->hdr_done < sizeof(FrameHeader) || p->done < p->len) return Status::Ok();
    p->complete = true;
    lane.sends.pop_front();
  }
  return Status::Ok();
}

Status Engine::ProgressRecv(int peer, Lane& lane, bool* moved) {
  while (!lane.recvs.empty()) {
    Part* p = lane.recvs.front();
    iovec iov[2];
    int n = 0;
    // The header may arrive in pieces, so it is kept with its part.
    if (p->hdr_done < sizeof(FrameHeader)) {
      iov[n++] = {reinterpret_cast<char*>(&p->got) + p->hdr_done, sizeof(FrameHeader) - p->hdr_done};
    } else if (p->len > p->done) {
      iov[n++] = {p->data + p->done, p->len - p->done};
    }
    if (n == 0) {
      p->complete = true;
      lane.recvs.pop_front();
      continue;
    }
    auto r = lane.pair->TryRead(iov, CapIov(iov, n, opt_.max_io_bytes));
    if (!r.ok()) return LinkLost(peer, lane, r.status().message());
    size_t got = *r;
    if (got == 0) return Status::Ok();
    *moved = true;
    if (p->hdr_done < sizeof(FrameHeader)) {
      p->hdr_done += got;
      if (p->hdr_done < sizeof(FrameHeader)) return Status::Ok();
      switch (CheckFrame(p->got, p->hdr)) {
        case FrameCheck::kOk: break;
        case FrameCheck::kFail:
          return Adopt(peer, lane, p->got);
        case FrameCheck::kBye:
          lane.left = true;
          return Break(StatusCode::kUnavailable,
                       fmt::format("{} left the group while this rank still needed it", Describe(peer)));
        case FrameCheck::kBadMagic:
          return Break(StatusCode::kInternal, fmt::format("the stream from {} is corrupt (bad magic {:#x})", Describe(peer),
                                                          p->got.magic));
        case FrameCheck::kOutOfStep:
          return Break(StatusCode::kInternal, fmt::format("the stream from {} is out of step (message {} where {} was due)",
                                                          Describe(peer), p->got.seq, p->hdr.seq));
        case FrameCheck::kWrongLength:
          return Break(StatusCode::kInvalidArgument,
                       fmt::format("{} sent {} bytes where this rank expected {} (do all ranks call the same "
                                   "collectives with the same counts?)",
                                   Describe(peer), p->got.len, p->hdr.len));
      }
      continue;  // now the payload
    }
    p->done += got;
    if (p->done < p->len) return Status::Ok();
    p->complete = true;
    lane.recvs.pop_front();
  }
  return Status::Ok();
}

Status Engine::Progress(bool* moved) {
  for (int peer = 0; peer < size_; ++peer) {
    for (Lane& lane : lanes_[peer]) {
      if (!lane.pair) continue;
      RM_RETURN_IF_ERROR(ProgressSend(peer, lane, moved));
      RM_RETURN_IF_ERROR(ProgressRecv(peer, lane, moved));
    }
  }
  return Status::Ok();
}

int Engine::FirstPendingPeer() const {
  for (int peer = 0; peer < size_; ++peer) {
    for (const Lane& lane : lanes_[peer]) {
      if (!lane.recvs.empty()) return peer;
    }
  }
  for (int peer = 0; peer < size_; ++peer) {
    for (const Lane& lane : lanes_[peer]) {
      if (!lane.sends.empty()) return peer;
    }
  }
  return -1;
}

Status Engine::OnHangup(int peer, Lane& lane) {
  FrameHeader h{};
  size_t n = lane.pair->Peek(&h, sizeof h);
  if (n == sizeof h && h.magic == kByeMagic) {
    lane.left = true;
    if (lane.sends.empty() && lane.recvs.empty()) return Status::Ok();
    return Break(StatusCode::kUnavailable, fmt::format("{} left the group while this rank still needed it", Describe(peer)));
  }
  if (n == sizeof h && h.magic == kFailMagic) {
    iovec iov{&h, sizeof h};
    auto r = lane.pair->TryRead(&iov, 1);
    if (r.ok() && *r == sizeof h) return Adopt(peer, lane, h);
  }
  if (n > 0) {
    // Frames it sent before it went are still to be read (a goodbye or a
    // failure notice may follow them): not a failure yet. Stop polling the
    // lane until something is posted on it, or the hang-up would spin.
    lane.hung_up = true;
    return Status::Ok();
  }
  return LinkLost(peer, lane, "its connection closed");
}

// Peers without a descriptor to poll (shared memory): their flags and process.
Status Engine::CheckLiveness(bool* moved) {
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_ || lanes_[peer].empty() || !lanes_[peer][0].pair) continue;
    Lane& lane = lanes_[peer][0];
    if (lane.pair->fd() >= 0) continue;
    // Read the peer's state once: it may change between two reads.
    const PeerState state = lane.pair->State();
    const bool pending = !lane.sends.empty() || !lane.recvs.empty();
    if (state == PeerState::kBroken && (lane.recvs.empty() || lane.recvs.front()->hdr_done == 0)) {
      return LinkLost(peer, lane, "it failed");
    }
    if (!pending || state == PeerState::kAlive) continue;
    // It may have sent what we wait for before it went: drain that first.
    RM_RETURN_IF_ERROR(Progress(moved));
    if (*moved) return Status::Ok();
    if (state == PeerState::kGone) {
      return Break(StatusCode::kUnavailable, fmt::format("{} died: its process is gone", Describe(peer)));
    }
    if (state == PeerState::kBroken) return LinkLost(peer, lane, "it failed");
    return Break(StatusCode::kUnavailable, fmt::format("{} left the group while this rank still needed it", Describe(peer)));
  }
  return Status::Ok();
}

// Waits until some pending transfer may move, the deadline passes, a peer
// fails, or the context is aborted. `bell` was read before the last Progress.
Status Engine::Block(uint32_t bell) {
  poked_.store(false);
  if (!failure_->ok()) return failure_->status();
  std::string reason;
  if (failure_->AbortRequested(&reason)) return FailHere(StatusCode::kAborted, "aborted: " + reason);
  auto now = SteadyClock::now();
  if (now >= deadline_) {
    int peer = FirstPendingPeer();
    return Break(StatusCode::kDeadlineExceeded,
                 fmt::format("timed out after {:.1f} s waiting for {}", opt_.timeout.count() / 1000.0,
                             peer >= 0 ? Describe(peer) : std::string("the group")));
  }
  if (now - last_liveness_check_ >= kLivenessEvery) {
    last_liveness_check_ = now;
    bool moved = false;
    RM_RETURN_IF_ERROR(CheckLiveness(&moved));
    if (moved) return Status::Ok();
  }
  auto slice = std::min<std::chrono::milliseconds>(
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - now) + std::chrono::milliseconds(1),
      std::chrono::milliseconds(50));

  std::vector<pollfd> fds;
  std::vector<int> fd_peer;
  std::vector<Lane*> fd_lane;
  bool bell_pending = false;
  for (int peer = 0; peer < size_; ++peer) {
    for (Lane& lane : lanes_[peer]) {
      if (!lane.pair) continue;
      int fd = lane.pair->fd();
      bool pending = !lane.sends.empty() || !lane.recvs.empty();
      if (fd < 0) {
        bell_pending |= pending;
        continue;
      }
      if (lane.left || (lane.hung_up && !pending)) continue;
      short ev = POLLRDHUP;  // every TCP peer: learn at once when one dies
      if (!lane.recvs.empty()) ev |= POLLIN;
      if (!lane.sends.empty()) ev |= POLLOUT;
      fds.push_back({fd, ev, 0});
      fd_peer.push_back(peer);
      fd_lane.push_back(&lane);
    }
  }
  bool fd_pending = std::any_of(fds.begin(), fds.end(), [](const pollfd& p) { return p.events & (POLLIN | POLLOUT); });
  if (bell_pending && !fd_pending && bell_) {
    // Poll the doorbell briefly before sleeping: a futex wake-up costs a
    // trip through the scheduler, far more than a small message takes.
    // sched_yield keeps this fair when ranks outnumber cores.
    for (int i = 0; i < kSpinYields; ++i) {
      if (bell_->Read() != bell || poked_.load()) return Status::Ok();
      sched_yield();
    }
    bell_->Wait(bell, slice);
    return Status::Ok();
  }
  fds.push_back({wake_fd_, POLLIN, 0});
  int timeout_ms = bell_pending ? 1 : static_cast<int>(slice.count());
  int r = poll(fds.data(), fds.size(), timeout_ms);
  if (r < 0 && errno != EINTR) return FailHere(StatusCode::kInternal, std::string("poll: ") + std::strerror(errno));
  if (fds.back().revents & POLLIN) {
    uint64_t v;
    (void)!read(wake_fd_, &v, sizeof v);
  }
  for (size_t i = 0; i + 1 < fds.size(); ++i) {
    if (fds[i].revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) {
      Lane& lane = *fd_lane[i];
      bool pending = !lane.sends.empty() || !lane.recvs.empty();
      // Bytes still buffered are read first: the peer may have sent them before leaving.
      if (pending && (fds[i].revents & POLLIN) && (fds[i].events & POLLIN)) continue;
      if (!pending || lane.recvs.empty()) {
        RM_RETURN_IF_ERROR(OnHangup(fd_peer[i], lane));
        continue;
      }
      return LinkLost(fd_peer[i], lane, "its connection closed");
    }
  }
  return Status::Ok();
}

Status Engine::Drive() {
  uint32_t bell = Bell();
  bool moved = false;
  RM_RETURN_IF_ERROR(Progress(&moved));
  if (!moved) RM_RETURN_IF_ERROR(Block(bell));
  return Status::Ok();
}

Status Engine::WaitAll(std::initializer_list<Msg*> ms) {
  while (!std::all_of(ms.begin(), ms.end(), [](Msg* m) { return !m || m->Complete(); })) RM_RETURN_IF_ERROR(Drive());
  return Status::Ok();
}

}  // namespace ringmaster::comm
