// Shared-memory pairs for ranks on one host. Every rank owns a segment in
// /dev/shm holding, per channel, a doorbell futex and one inbound SPSC byte
// ring per peer; a pair writes into the peer's segment and reads from its
// own. Channel 0 carries collectives, channel 1 point to point, so neither
// ever waits behind the other and each has its own doorbell. Whoever moves
// bytes rings the other side's doorbell, so a blocked rank sleeps on its own
// doorbell instead of spinning. Segments are unlinked once every rank has
// mapped them, so nothing is left in /dev/shm after a crash. Mappings are
// populated up front (MAP_POPULATE): faulting ring pages in on first use
// cost ~5 us per KiB on the first pass through every ring.
// Connection setup over the store is shm_device.h.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/transport.h"

namespace ringmaster::comm {

class ShmSegment {
 public:
  static constexpr int kChannels = 2;  // 0: collectives, 1: point to point
  using RingSizes = std::array<size_t, kChannels>;

  static StatusOr<std::unique_ptr<ShmSegment>> Create(const std::string& name, int size, RingSizes ring_bytes);
  // Checks that the segment is a ringcomm segment of `size` ranks.
  static StatusOr<std::unique_ptr<ShmSegment>> Open(const std::string& name, int size);
  ~ShmSegment();

  void Unlink();
  const std::string& name() const { return name_; }
  pid_t owner_pid() const;
  // The owner's doorbell for `channel`: it sleeps on it, peers ring it.
  Doorbell* bell(int channel) { return bells_[channel].get(); }
  // Owner-set flags peers read: the owner's context broke (and why, if it
  // says: at most kMaxNote bytes), or it left cleanly.
  static constexpr size_t kMaxNote = 1024;
  void SetBroken(uint32_t code = 0, const std::string& note = "");
  void SetLeft();
  bool Broken() const;
  bool Left() const;
  // The cause the owner gave when it broke; false if it gave none.
  bool BrokenNote(uint32_t* code, std::string* note) const;

  struct RingView;
  RingView ring(int channel, int from_rank);

 private:
  ShmSegment() = default;
  void Map(void* base, size_t bytes);
  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  bool owner_ = false;
  std::array<std::unique_ptr<Doorbell>, kChannels> bells_;
};

class ShmPair final : public Pair {
 public:
  // mine: this rank's segment; theirs: the peer's.
  ShmPair(ShmSegment* mine, std::shared_ptr<ShmSegment> theirs, int my_rank, int peer_rank, int channel);
  StatusOr<size_t> TryWrite(const iovec* iov, int n) override;
  StatusOr<size_t> TryRead(const iovec* iov, int n) override;
  size_t Peek(void* buf, size_t n) override;
  Doorbell* doorbell() const override { return mine_->bell(channel_); }
  PeerState State() const override;
  void Shutdown(bool clean) override;
  void Fail(StatusCode code, const std::string& cause) override;
  bool PeerFailure(StatusCode* code, std::string* cause) const override;
  const char* kind() const override { return "shm"; }

 private:
  ShmSegment* mine_;
  std::shared_ptr<ShmSegment> theirs_;
  int my_rank_, peer_rank_, channel_;
};

// True if `pid` is a live process (a zombie counts as dead).
bool ProcessAlive(pid_t pid);

}  // namespace ringmaster::comm
