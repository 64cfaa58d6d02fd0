#include "comm/wire.h"

#include <fmt/format.h>

namespace ringmaster::comm {

Status CheckHello(const Hello& h, int rank, int size, int streams, int generation) {
  if (h.magic != kHelloMagic) return Unavailable(fmt::format("bad hello magic {:#x}: not a ringcomm rank", h.magic));
  if (h.generation != generation) {
    return Unavailable(fmt::format("hello from generation {} where this group is generation {}", h.generation, generation));
  }
  if (h.rank <= rank || h.rank >= size) {
    return Unavailable(fmt::format("hello from rank {}: only ranks {}..{} dial rank {}", h.rank, rank + 1, size - 1, rank));
  }
  if (h.channel != kP2pChannel && (h.channel < 0 || h.channel >= streams)) {
    return Unavailable(fmt::format("hello for channel {} of {} streams", h.channel, streams));
  }
  return Status::Ok();
}

std::string HelloTranscript(const Hello& h, std::string_view dialer_nonce, std::string_view acceptor_nonce) {
  std::string t(reinterpret_cast<const char*>(&h), sizeof h);
  t.append(dialer_nonce);
  t.append(acceptor_nonce);
  return t;
}

FrameCheck CheckFrame(const FrameHeader& got, const FrameHeader& want) {
  if (got.magic == kByeMagic) return FrameCheck::kBye;
  if (got.magic == kFailMagic) return FrameCheck::kFail;
  if (got.magic != kFrameMagic) return FrameCheck::kBadMagic;
  if (got.seq != want.seq) return FrameCheck::kOutOfStep;
  if (got.len != want.len) return FrameCheck::kWrongLength;
  return FrameCheck::kOk;
}

Status CheckFailNotice(const FrameHeader& h) {
  if (h.seq <= static_cast<uint32_t>(StatusCode::kOk) || h.seq > static_cast<uint32_t>(StatusCode::kInternal)) {
    return Internal(fmt::format("sent a failure notice with unknown code {}", h.seq));
  }
  if (h.len == 0 || h.len > kMaxFailNote) return Internal(fmt::format("sent a failure notice of {} bytes", h.len));
  return Status::Ok();
}

const char* P2pKindName(uint32_t kind) {
  switch (static_cast<P2pKind>(kind)) {
    case P2pKind::kEager: return "eager";
    case P2pKind::kRts: return "ready-to-send";
    case P2pKind::kCts: return "clear-to-send";
    case P2pKind::kData: return "data";
    case P2pKind::kBye: return "goodbye";
  }
  return "unknown";
}

std::string TagName(int64_t tag) { return fmt::format("tag {}", tag); }

Status CheckP2pHeader(const P2pHeader& h, uint64_t eager_bytes) {
  if (h.magic != kP2pMagic) {
    return Internal(fmt::format("sent a point-to-point frame with bad magic {:#x} (the stream is corrupt)", h.magic));
  }
  if (h.kind < static_cast<uint32_t>(P2pKind::kEager) || h.kind > static_cast<uint32_t>(P2pKind::kBye)) {
    return Internal(fmt::format("sent a point-to-point frame of unknown kind {}", h.kind));
  }
  if (h.len > kMaxMessageBytes) {
    return Internal(fmt::format("sent a {} frame claiming {} bytes, more than any message can hold", P2pKindName(h.kind), h.len));
  }
  const auto kind = static_cast<P2pKind>(h.kind);
  if (kind == P2pKind::kEager && h.len > eager_bytes) {
    return Internal(fmt::format("sent an eager message of {} bytes, above the eager limit of {}", h.len, eager_bytes));
  }
  if ((kind == P2pKind::kCts || kind == P2pKind::kBye) && h.len != 0) {
    return Internal(fmt::format("sent a {} frame with a length of {}", P2pKindName(h.kind), h.len));
  }
  return Status::Ok();
}

}  // namespace ringmaster::comm
