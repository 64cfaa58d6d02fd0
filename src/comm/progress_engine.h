// The collective progress engine: frames messages over each peer's
// collective pairs (FrameHeader, wire.h: in order per peer and stream, so the
// receiver knows what is due and a message lands in place, zero-copy) and
// drives them until they complete, a peer fails, the operation's deadline
// passes or the Context is aborted. Algorithms (algorithms.h) post messages
// and wait; they never see a Pair.
//
// While it waits it polls every TCP peer for hang-ups, not only those it
// waits on, and checks shared-memory peers' processes and flags every
// 100 ms, so a dead rank is named within a second, not at the deadline.
// Point-to-point messages never come here: they have their own channel
// (p2p_engine.h).
//
// Thread-safety: one operation at a time (the Context serialises them);
// Wake() and BreakLinks() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "comm/failure.h"
#include "comm/options.h"
#include "comm/transport.h"
#include "comm/wire.h"

namespace ringmaster::comm {

class Engine {
 public:
  // One stripe of a message on one lane (peer, stream).
  struct Part {
    char* data = nullptr;
    size_t len = 0;
    FrameHeader hdr{};  // sends: what goes out; receives: what is expected
    FrameHeader got{};  // receives: the header as it arrives (possibly in pieces)
    size_t hdr_done = 0, done = 0;
    bool complete = false;
  };
  struct Msg {
    std::vector<Part> parts;
    bool Complete() const;
  };

  // lanes[peer][stream]; lanes[rank] is empty. `failure` and `describe` must
  // outlive the engine.
  Engine(int rank, int size, const Options& options, std::vector<std::vector<std::unique_ptr<Pair>>> lanes,
         Failure* failure, std::function<std::string(int)> describe);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const Options& options() const { return opt_; }
  std::string Describe(int rank) const { return describe_(rank); }

  // Starts operation `name` (its deadline is options().timeout from now).
  // Fails with the sticky status if the Context has failed or was aborted.
  Status Begin(const char* name);
  // Forgets the operation's messages.
  void End();
  const char* op() const { return op_; }

  // Queues a message to or from `peer`; it moves during Drive(). Messages
  // of one direction to one peer go in order. Valid until End().
  Msg* Post(int peer, bool send, char* data, size_t len);
  // One turn: move bytes, or block until something can move.
  Status Drive();
  Status WaitAll(std::initializer_list<Msg*> ms);

  // Scratch buffers the algorithms reuse across operations.
  std::vector<char>& scratch_a() { return scratch_a_; }
  std::vector<char>& scratch_b() { return scratch_b_; }

  // Any thread: a blocked Drive() returns to look at the failure state.
  void Wake();
  // Any thread: every pair fails with `cause`, so peers learn at once (and why).
  void BreakLinks(StatusCode code, const std::string& cause);
  // After the last operation of a healthy Context: a goodbye frame on every
  // lane, then a clean shutdown, so peers that finish later do not take this
  // rank for a crashed one.
  void SayGoodbye();

 private:
  struct Lane {
    std::unique_ptr<Pair> pair;
    std::deque<Part*> sends, recvs;
    uint32_t send_seq = 0, recv_seq = 0;
    bool left = false;     // the peer said goodbye: it finished cleanly
    bool hung_up = false;  // the peer closed; what it sent first is still to be read
  };
  // What a lane still owes its peer when this rank fails.
  struct Owed {
    Lane* lane;
    Part* half;              // a send half written, or null
    size_t notice_done = 0;  // bytes of the notice (header, then note) written
  };

  // Records the failure and tells the peers the group's cause (a notice on
  // every lane) before the links break.
  Status Break(StatusCode code, const std::string& what);
  // A failure of this rank's own (abort): sticky, no store note; peers are told who failed and why.
  Status FailHere(StatusCode code, const std::string& what);
  // Writes the failure notice on every lane to a live peer, first finishing
  // a frame it is in the middle of; waits (kNoticeLinger at most) for peers
  // that are slow to make room, so they hear the cause, not "<this rank> died".
  void SendFailNotices(StatusCode code, const std::string& cause);
  // Writes what of `o` goes now; true once it is all written or the link is gone.
  bool Repay(Owed& o, const FrameHeader& h, const std::string& note);
  // A failure notice arrived from `peer` (its header is in `h`): this rank
  // fails with the cause the peer relayed.
  Status Adopt(int peer, Lane& lane, const FrameHeader& h);
  // A link to `peer` was lost (`how`): if the peer failed and said why (a
  // failure notice, possibly behind frames it sent first, or its
  // transport's note), that cause; otherwise "<peer> died: <how>".
  Status LinkLost(int peer, Lane& lane, const std::string& how);
  // Reads past what is left of the lane's incoming frames, as far as bytes
  // are there; true with the notice's header in `h` if one follows them.
  bool SkipToNotice(Lane& lane, FrameHeader* h);
  // A TCP lane with nothing to receive hung up: a goodbye (Ok while nothing
  // is pending), a failure notice (adopted), data still to read (Ok), or a crash.
  Status OnHangup(int peer, Lane& lane);
  Status ProgressSend(int peer, Lane& lane, bool* moved);
  Status ProgressRecv(int peer, Lane& lane, bool* moved);
  Status Progress(bool* moved);
  Status Block(uint32_t bell);
  Status CheckLiveness(bool* moved);
  int FirstPendingPeer() const;
  uint32_t Bell() const { return bell_ ? bell_->Read() : 0; }

  const int rank_, size_;
  const Options opt_;
  std::vector<std::vector<Lane>> lanes_;  // [peer][stream]
  Failure* const failure_;
  const std::function<std::string(int)> describe_;
  Doorbell* bell_ = nullptr;  // shared by the lanes without a descriptor
  int wake_fd_ = -1;
  std::atomic<bool> poked_{false};

  // The operation in progress.
  const char* op_ = "setup";
  std::chrono::steady_clock::time_point deadline_;
  std::deque<Msg> msgs_;
  std::chrono::steady_clock::time_point last_liveness_check_;
  std::vector<char> scratch_a_, scratch_b_;
};

}  // namespace ringmaster::comm
