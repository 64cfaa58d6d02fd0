#include "comm/fake_pair.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>

namespace ringmaster::comm {

uint32_t FakeDoorbell::Read() const {
  std::lock_guard<std::mutex> l(mu_);
  return value_;
}

void FakeDoorbell::Wait(uint32_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [&] { return value_ != seen; });
}

void FakeDoorbell::Ring() {
  {
    std::lock_guard<std::mutex> l(mu_);
    ++value_;
  }
  cv_.notify_all();
}

namespace {

// One direction: bytes from the writer's end to the reader's.
struct Pipe {
  std::mutex mu;
  std::deque<char> bytes;  // GUARDED_BY(mu)
  bool closed = false;     // the writer shut down cleanly; GUARDED_BY(mu)
  std::atomic<PeerState> writer{PeerState::kAlive};
};

class FakePair final : public Pair {
 public:
  FakePair(std::shared_ptr<Pipe> out, std::shared_ptr<Pipe> in, Doorbell* mine, Doorbell* theirs, FakeOptions o)
      : out_(std::move(out)), in_(std::move(in)), mine_(mine), theirs_(theirs), o_(o) {}
  // Like a process exiting: the peer sees the link go, unless this end said goodbye first.
  ~FakePair() override {
    PeerState expected = PeerState::kAlive;
    out_->writer.compare_exchange_strong(expected, PeerState::kGone);
    Ring(theirs_);
  }

  StatusOr<size_t> TryWrite(const iovec* iov, int n) override {
    if (in_->writer.load() == PeerState::kBroken || in_->writer.load() == PeerState::kGone) {
      return Unavailable("connection lost: the peer is gone");
    }
    size_t moved = 0;
    {
      std::lock_guard<std::mutex> l(out_->mu);
      if (out_->closed) return Unavailable("connection lost: this end was shut down");
      size_t room = o_.capacity - std::min(o_.capacity, out_->bytes.size());
      if (o_.max_io) room = std::min(room, o_.max_io);
      for (int i = 0; i < n && room > 0; ++i) {
        size_t len = std::min(iov[i].iov_len, room);
        const char* p = static_cast<const char*>(iov[i].iov_base);
        out_->bytes.insert(out_->bytes.end(), p, p + len);
        moved += len;
        room -= len;
      }
    }
    if (moved > 0) Ring(theirs_);
    return moved;
  }

  StatusOr<size_t> TryRead(const iovec* iov, int n) override {
    size_t moved = 0;
    {
      std::lock_guard<std::mutex> l(in_->mu);
      size_t room = o_.max_io ? o_.max_io : SIZE_MAX;
      for (int i = 0; i < n && room > 0 && !in_->bytes.empty(); ++i) {
        size_t len = std::min({iov[i].iov_len, room, in_->bytes.size()});
        std::copy_n(in_->bytes.begin(), len, static_cast<char*>(iov[i].iov_base));
        in_->bytes.erase(in_->bytes.begin(), in_->bytes.begin() + static_cast<std::ptrdiff_t>(len));
        moved += len;
        room -= len;
        if (len < iov[i].iov_len) break;
      }
      if (moved == 0 && in_->bytes.empty()) {
        PeerState w = in_->writer.load();
        if (in_->closed) return Unavailable("connection closed by the peer");
        if (w == PeerState::kBroken || w == PeerState::kGone) return Unavailable("connection reset by the peer");
      }
    }
    if (moved > 0) Ring(theirs_);
    return moved;
  }

  size_t Peek(void* buf, size_t n) override {
    std::lock_guard<std::mutex> l(in_->mu);
    size_t len = std::min(n, in_->bytes.size());
    std::copy_n(in_->bytes.begin(), len, static_cast<char*>(buf));
    return len;
  }

  Doorbell* doorbell() const override { return mine_; }
  PeerState State() const override {
    PeerState w = in_->writer.load();
    if (w != PeerState::kAlive) return w;
    std::lock_guard<std::mutex> l(in_->mu);
    return in_->closed ? PeerState::kLeft : PeerState::kAlive;
  }
  void Shutdown(bool clean) override {
    if (clean) {
      std::lock_guard<std::mutex> l(out_->mu);
      out_->closed = true;
    } else {
      out_->writer.store(PeerState::kBroken);
    }
    Ring(theirs_);
    Ring(mine_);
  }
  const char* kind() const override { return "fake"; }

 private:
  static void Ring(Doorbell* b) {
    if (b) b->Ring();
  }
  std::shared_ptr<Pipe> out_, in_;
  Doorbell* mine_;
  Doorbell* theirs_;
  FakeOptions o_;
};

}  // namespace

std::pair<std::unique_ptr<Pair>, std::unique_ptr<Pair>> MakeFakePairs(Doorbell* a_bell, Doorbell* b_bell,
                                                                       FakeOptions options) {
  auto ab = std::make_shared<Pipe>(), ba = std::make_shared<Pipe>();
  return {std::make_unique<FakePair>(ab, ba, a_bell, b_bell, options),
          std::make_unique<FakePair>(ba, ab, b_bell, a_bell, options)};
}

FakeMesh::FakeMesh(int size, int streams, FakeOptions options) : size_(size), links_(size) {
  for (int i = 0; i < 2 * size; ++i) bells_.push_back(std::make_unique<FakeDoorbell>());
  auto bell = [&](int rank, int channel) { return bells_[static_cast<size_t>(rank * 2 + channel)].get(); };
  for (int r = 0; r < size; ++r) {
    links_[r].peers.resize(size);
    for (int p = 0; p < size; ++p) links_[r].peers[p] = {"fake", "", "", 0, 1000 + p, ""};
    links_[r].collective.resize(size);
    links_[r].p2p.resize(size);
  }
  for (int a = 0; a < size; ++a) {
    for (int b = a + 1; b < size; ++b) {
      for (int s = 0; s < streams; ++s) {
        auto [x, y] = MakeFakePairs(bell(a, 0), bell(b, 0), options);
        links_[a].collective[b].push_back(std::move(x));
        links_[b].collective[a].push_back(std::move(y));
      }
      auto [x, y] = MakeFakePairs(bell(a, 1), bell(b, 1), options);
      links_[a].p2p[b] = std::move(x);
      links_[b].p2p[a] = std::move(y);
    }
  }
}

Links FakeMesh::Take(int rank) { return std::move(links_[rank]); }

}  // namespace ringmaster::comm
