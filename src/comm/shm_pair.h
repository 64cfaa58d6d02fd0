// Shared-memory pairs for ranks on one host. Every rank owns a segment in
// /dev/shm holding a doorbell futex and one inbound SPSC byte ring per peer;
// a pair writes into the peer's segment and reads from its own. Whoever
// moves bytes rings the other side's doorbell, so a blocked rank sleeps on
// its own doorbell instead of spinning. Segments are unlinked once every
// rank has mapped them, so nothing is left in /dev/shm after a crash.
// Mappings are populated up front (MAP_POPULATE): faulting ring pages in on
// first use cost ~5 us per KiB on the first pass through every ring.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/transport.h"

namespace ringmaster::comm {

class ShmSegment {
 public:
  static StatusOr<std::unique_ptr<ShmSegment>> Create(const std::string& name, int size, size_t ring_bytes);
  static StatusOr<std::unique_ptr<ShmSegment>> Open(const std::string& name);
  ~ShmSegment();

  void Unlink();
  pid_t owner_pid() const;
  // The doorbell of this segment's owner.
  void Ring();
  // Waits until the doorbell moves past `seen` or `timeout` passes.
  void WaitBell(uint32_t seen, std::chrono::milliseconds timeout);
  uint32_t Bell() const;
  // Owner-set flags peers read: the owner's context broke, or it left cleanly.
  void SetBroken();
  void SetLeft();
  bool Broken() const;
  bool Left() const;

  struct RingView;
  RingView ring(int from_rank);
  size_t ring_bytes() const;

 private:
  ShmSegment() = default;
  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  bool owner_ = false;
};

class ShmPair final : public Pair {
 public:
  // mine: this rank's segment; theirs: the peer's.
  ShmPair(ShmSegment* mine, std::shared_ptr<ShmSegment> theirs, int my_rank, int peer_rank);
  StatusOr<size_t> TryWrite(const iovec* iov, int n) override;
  StatusOr<size_t> TryRead(const iovec* iov, int n) override;
  bool PeerAlive() const override;
  bool PeerBroken() const { return theirs_->Broken(); }
  bool PeerLeft() const { return theirs_->Left(); }
  const char* kind() const override { return "shm"; }

 private:
  ShmSegment* mine_;
  std::shared_ptr<ShmSegment> theirs_;
  int my_rank_, peer_rank_;
};

// True if `pid` is a live process (a zombie counts as dead).
bool ProcessAlive(pid_t pid);

}  // namespace ringmaster::comm
