// ringcomm's wire formats, and the checks every frame passes before anything
// trusts its length. Pure functions, no I/O: the engines call them and the
// fuzz target comm_frame feeds them arbitrary bytes.
//
//   TCP hello      sent once by the dialling rank on each new connection;
//                  with the job's secret followed by its nonce, answered by
//                  the acceptor's nonce and proof, then the dialer's proof
//   collective     FrameHeader + payload, in order per (peer, stream): the
//                  receiver knows what is due, so the header only confirms it
//   point to point P2pHeader (+ payload), per peer on its own channel, matched
//                  by tag (p2p.h): eager messages carry their payload, larger
//                  ones go as ready-to-send, clear-to-send, data
//
// Integers are in host byte order: every rank of a group runs on the same
// kind of machine (x86-64 or aarch64, both little-endian).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ringmaster::comm {

// ---- TCP hello
constexpr uint32_t kHelloMagic = 0x48434d52;  // "RMCH"
constexpr int32_t kP2pChannel = -1;           // Hello::channel of the point-to-point connection

struct Hello {
  uint32_t magic;
  int32_t rank;        // the dialling rank
  int32_t channel;     // collective stream 0..streams-1, or kP2pChannel
  int32_t generation;  // must match: a stale rank of an old generation is turned away
};
static_assert(sizeof(Hello) == 16);

// Ok, or why a connection that sent `h` is not one of this group's: an
// accepting rank `rank` of `size` takes connections from higher ranks only.
Status CheckHello(const Hello& h, int rank, int size, int streams, int generation);

// What both proofs of a hello cover (auth.h: kHelloDialer, kHelloAcceptor):
// the hello itself, so a proof is good for one rank, channel and generation.
std::string HelloTranscript(const Hello& h, std::string_view dialer_nonce, std::string_view acceptor_nonce);

// ---- collective frames
constexpr uint32_t kFrameMagic = 0x52434d31;  // "RCM1"
constexpr uint32_t kByeMagic = 0x52434d42;    // "RCMB": a clean close
// "RCMF": the sender failed; seq holds a StatusCode, and len bytes of the
// group's cause follow (at most kMaxFailNote). Sent after the frame in flight
// on a lane, if any, just before the sender breaks its links.
constexpr uint32_t kFailMagic = 0x52434d46;
constexpr uint64_t kMaxFailNote = 1024;

struct FrameHeader {
  uint32_t magic;
  uint32_t seq;  // per (peer, stream) and direction
  uint64_t len;
};
static_assert(sizeof(FrameHeader) == 16);

enum class FrameCheck { kOk, kBye, kFail, kBadMagic, kOutOfStep, kWrongLength };
// Compares the header that arrived with the one this rank expects.
FrameCheck CheckFrame(const FrameHeader& got, const FrameHeader& want);
// Ok if a kFailMagic header is well formed (a known code, a bounded note).
Status CheckFailNotice(const FrameHeader& h);

// ---- point-to-point frames
constexpr uint32_t kP2pMagic = 0x50434d52;  // "RMCP"

enum class P2pKind : uint32_t {
  kEager = 1,  // tag, id, len, then len payload bytes
  kRts = 2,    // ready to send: tag, id, len; no payload
  kCts = 3,    // clear to send message id (the receiver has its buffer)
  kData = 4,   // id, len, then the payload of a message offered by kRts
  kBye = 5,    // a clean close
};

struct P2pHeader {
  uint32_t magic;
  uint32_t kind;
  int64_t tag;
  uint64_t id;   // the sender's message number on this channel
  uint64_t len;  // payload bytes (eager, data) or message bytes (rts); 0 otherwise
};
static_assert(sizeof(P2pHeader) == 32);

// No message is this big: a header claiming more is corrupt, not a request.
constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 40;

// Ok, or what is wrong with a header that arrived: bad magic, an unknown
// kind, an eager payload above `eager_bytes`, an impossible length. The
// message completes "rank 1 (host vm, pid 812) ...".
Status CheckP2pHeader(const P2pHeader& h, uint64_t eager_bytes);

const char* P2pKindName(uint32_t kind);
// "tag 3"
std::string TagName(int64_t tag);

}  // namespace ringmaster::comm
