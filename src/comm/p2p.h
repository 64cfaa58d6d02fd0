// Point-to-point matching over one peer's channel: MPI's rules. A receive
// for (peer, tag) gets the earliest unmatched message from that peer with
// that tag, so messages of one tag never overtake each other while messages
// of different tags may be received in any order.
//
// Protocol (P2pHeader, wire.h), both directions over one Pair:
//   - a message of at most eager_bytes goes at once (kEager, with its
//     payload). If no receive is posted for it yet, it is buffered: at most
//     unexpected_bytes per peer, beyond which the channel fails with an error
//     saying so, since a peer that floods unclaimed messages cannot be kept
//     up with.
//   - a larger message is offered (kRts). It waits, without buffering, until
//     a receive for it is posted; the receiver answers kCts and the sender
//     sends kData straight into the receive's buffer.
// Control frames (kCts) go ahead of queued data at the next frame boundary.
//
// No I/O of its own and no threads: Progress() moves what the Pair accepts
// without blocking, so the engine (p2p_engine.h) drives it and the fuzz
// target comm_frame feeds it arbitrary bytes through a fake pair. Errors
// complete the sentence "rank 1 (host vm, pid 812) ...".
// Not thread-safe: the engine holds its lock around every call.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "comm/transport.h"
#include "comm/wire.h"

namespace ringmaster::comm {

struct P2pRequest {
  bool send = false;
  int peer = 0;
  int64_t tag = 0;
  char* data = nullptr;
  size_t len = 0;
  std::chrono::steady_clock::time_point deadline{};
  const char* op() const { return send ? "send" : "recv"; }
};

struct P2pLimits {
  size_t eager_bytes = 64 << 10;
  size_t unexpected_bytes = 64 << 20;
  size_t max_io_bytes = 0;  // tests: cap each read and write
};

class P2pChannel {
 public:
  P2pChannel(Pair* pair, P2pLimits limits) : pair_(pair), limits_(limits) {}

  // Queues a send; it completes once its bytes are handed to the pair.
  void PostSend(P2pRequest* r);
  // Matches a receive against the messages that arrived before it, or waits
  // for its message. Completed requests are appended to *done.
  Status PostRecv(P2pRequest* r, std::vector<P2pRequest*>* done);
  // Moves bytes both ways without blocking; completed requests go to *done.
  Status Progress(bool* moved, std::vector<P2pRequest*>* done);

  // Requests posted here and not complete (sends, receives).
  bool Pending() const { return outstanding_ > 0; }
  bool WantsWrite() const { return tx_cur_.has_value() || !tx_ctrl_.empty() || !tx_data_.empty(); }
  // Every request not complete, in no order; the channel forgets them.
  std::vector<P2pRequest*> TakePending();
  // The peer said goodbye.
  bool left() const { return left_; }
  // A goodbye frame, if the channel is idle; true when it was handed to the pair.
  bool SayGoodbye();
  size_t unexpected_bytes() const { return unexpected_bytes_; }

 private:
  struct TxFrame {
    P2pHeader hdr;
    const char* payload;
    size_t len;
    P2pRequest* completes;  // a send that is done once this frame is out; or null
    size_t done = 0;        // bytes of header and payload written
  };
  // A message that arrived before its receive: an eager payload (still
  // arriving, or whole) or an offer (rts) still to be answered.
  struct Unexpected {
    int64_t tag;
    uint64_t id;
    bool rts;
    uint64_t len;
    std::vector<char> data;
    bool complete = false;
    P2pRequest* claimed = nullptr;  // a receive posted while the payload was arriving
  };
  enum class Rx { kHeader, kPayload };

  Status WriteSome(bool* moved, std::vector<P2pRequest*>* done);
  Status ReadSome(bool* moved, std::vector<P2pRequest*>* done);
  Status OnHeader(std::vector<P2pRequest*>* done);
  // The next len bytes land at dst, for receive r or unexpected message u.
  void StartPayload(char* dst, size_t len, P2pRequest* r, std::list<Unexpected>::iterator u, bool into_unexpected,
                    std::vector<P2pRequest*>* done);
  void OnPayload(std::vector<P2pRequest*>* done);
  Status Match(P2pRequest* r, std::list<Unexpected>::iterator u, std::vector<P2pRequest*>* done);
  Status Claim(const P2pRequest* r, uint64_t len) const;
  std::list<P2pRequest*>::iterator FindPosted(int64_t tag);
  void Complete(P2pRequest* r, std::vector<P2pRequest*>* done);
  void QueueCts(uint64_t id);

  Pair* const pair_;
  const P2pLimits limits_;
  uint64_t next_id_ = 0;
  int outstanding_ = 0;  // requests posted and not complete

  // Sending.
  std::deque<TxFrame> tx_ctrl_, tx_data_;
  std::optional<TxFrame> tx_cur_;
  std::unordered_map<uint64_t, P2pRequest*> awaiting_cts_;  // offered sends, by id

  // Receiving.
  Rx rx_ = Rx::kHeader;
  P2pHeader rx_hdr_{};
  size_t rx_hdr_done_ = 0;
  char* rx_dst_ = nullptr;
  size_t rx_left_ = 0;
  std::list<P2pRequest*> posted_;     // receives waiting for a message, in post order
  std::list<Unexpected> unexpected_;  // messages waiting for a receive, in arrival order
  P2pRequest* rx_req_ = nullptr;      // the payload lands in this receive,
  std::list<Unexpected>::iterator rx_unexp_;  // or in this message's buffer
  bool rx_into_unexpected_ = false;
  std::unordered_map<uint64_t, P2pRequest*> awaiting_data_;  // receives that answered an offer, by id
  size_t unexpected_bytes_ = 0;
  bool left_ = false;
};

}  // namespace ringmaster::comm
