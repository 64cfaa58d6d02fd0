#include "comm/p2p.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace ringmaster::comm {
namespace {

// What an unclaimed message costs against the budget besides its payload,
// so a flood of empty messages or offers is bounded too.
constexpr size_t kEntryCost = 256;

}  // namespace

void P2pChannel::PostSend(P2pRequest* r) {
  ++outstanding_;
  const uint64_t id = next_id_++;
  if (r->len <= limits_.eager_bytes) {
    tx_data_.push_back({P2pHeader{kP2pMagic, static_cast<uint32_t>(P2pKind::kEager), r->tag, id, r->len}, r->data, r->len, r});
  } else {
    tx_data_.push_back({P2pHeader{kP2pMagic, static_cast<uint32_t>(P2pKind::kRts), r->tag, id, r->len}, nullptr, 0, nullptr});
    awaiting_cts_[id] = r;
  }
}

Status P2pChannel::PostRecv(P2pRequest* r, std::vector<P2pRequest*>* done) {
  ++outstanding_;
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (it->tag == r->tag && !it->claimed) return Match(r, it, done);
  }
  posted_.push_back(r);
  if (left_) return Unavailable("left the group while this rank still needed it");
  return Status::Ok();
}

void P2pChannel::Complete(P2pRequest* r, std::vector<P2pRequest*>* done) {
  --outstanding_;
  done->push_back(r);
}

Status P2pChannel::Claim(const P2pRequest* r, uint64_t len) const {
  if (len == r->len) return Status::Ok();
  return InvalidArgument(fmt::format("sent {} bytes with {} where this rank expected {} (do both ranks pass "
                                     "buffers of the same size?)",
                                     len, TagName(r->tag), r->len));
}

Status P2pChannel::Match(P2pRequest* r, std::list<Unexpected>::iterator u, std::vector<P2pRequest*>* done) {
  if (Status st = Claim(r, u->len); !st.ok()) {
    posted_.push_back(r);  // still outstanding: failed with the rest
    return st;
  }
  if (u->rts) {
    awaiting_data_[u->id] = r;
    QueueCts(u->id);
    unexpected_bytes_ -= kEntryCost;
    unexpected_.erase(u);
  } else if (u->complete) {
    if (u->len > 0) std::memcpy(r->data, u->data.data(), u->len);
    Complete(r, done);
    unexpected_bytes_ -= u->len + kEntryCost;
    unexpected_.erase(u);
  } else {
    u->claimed = r;  // completes when the rest of its payload is in
  }
  return Status::Ok();
}

std::list<P2pRequest*>::iterator P2pChannel::FindPosted(int64_t tag) {
  return std::find_if(posted_.begin(), posted_.end(), [tag](const P2pRequest* r) { return r->tag == tag; });
}

void P2pChannel::QueueCts(uint64_t id) {
  tx_ctrl_.push_back({P2pHeader{kP2pMagic, static_cast<uint32_t>(P2pKind::kCts), 0, id, 0}, nullptr, 0, nullptr});
}

Status P2pChannel::Progress(bool* moved, std::vector<P2pRequest*>* done) {
  RM_RETURN_IF_ERROR(WriteSome(moved, done));
  RM_RETURN_IF_ERROR(ReadSome(moved, done));
  return WriteSome(moved, done);  // what reading queued (clear-to-send, data)
}

Status P2pChannel::WriteSome(bool* moved, std::vector<P2pRequest*>* done) {
  while (true) {
    if (!tx_cur_) {
      auto& q = !tx_ctrl_.empty() ? tx_ctrl_ : tx_data_;
      if (q.empty()) return Status::Ok();
      tx_cur_ = q.front();
      q.pop_front();
    }
    TxFrame& f = *tx_cur_;
    iovec iov[2];
    int n = 0;
    if (f.done < sizeof(P2pHeader)) iov[n++] = {reinterpret_cast<char*>(&f.hdr) + f.done, sizeof(P2pHeader) - f.done};
    size_t payload_done = f.done > sizeof(P2pHeader) ? f.done - sizeof(P2pHeader) : 0;
    if (f.len > payload_done) iov[n++] = {const_cast<char*>(f.payload) + payload_done, f.len - payload_done};
    auto w = pair_->TryWrite(iov, CapIov(iov, n, limits_.max_io_bytes));
    if (!w.ok()) return Unavailable("died: " + w.status().message());
    if (*w == 0) return Status::Ok();
    *moved = true;
    f.done += *w;
    if (f.done < sizeof(P2pHeader) + f.len) continue;
    if (f.completes) Complete(f.completes, done);
    tx_cur_.reset();
  }
}

Status P2pChannel::ReadSome(bool* moved, std::vector<P2pRequest*>* done) {
  while (!left_) {
    iovec iov;
    if (rx_ == Rx::kHeader) {
      iov = {reinterpret_cast<char*>(&rx_hdr_) + rx_hdr_done_, sizeof(P2pHeader) - rx_hdr_done_};
    } else {
      iov = {rx_dst_, rx_left_};
    }
    auto r = pair_->TryRead(&iov, CapIov(&iov, 1, limits_.max_io_bytes));
    if (!r.ok()) return Unavailable("died: " + r.status().message());
    if (*r == 0) return Status::Ok();
    *moved = true;
    if (rx_ == Rx::kHeader) {
      rx_hdr_done_ += *r;
      if (rx_hdr_done_ < sizeof(P2pHeader)) continue;
      rx_hdr_done_ = 0;
      RM_RETURN_IF_ERROR(OnHeader(done));
    } else {
      rx_dst_ += *r;
      rx_left_ -= *r;
      if (rx_left_ == 0) OnPayload(done);
    }
  }
  return Status::Ok();
}

void P2pChannel::StartPayload(char* dst, size_t len, P2pRequest* r, std::list<Unexpected>::iterator u, bool into_unexpected,
                              std::vector<P2pRequest*>* done) {
  rx_req_ = r;
  rx_unexp_ = u;
  rx_into_unexpected_ = into_unexpected;
  if (len == 0) {
    OnPayload(done);
    return;
  }
  rx_ = Rx::kPayload;
  rx_dst_ = dst;
  rx_left_ = len;
}

void P2pChannel::OnPayload(std::vector<P2pRequest*>* done) {
  rx_ = Rx::kHeader;
  if (rx_into_unexpected_) {
    rx_into_unexpected_ = false;
    Unexpected& u = *rx_unexp_;
    u.complete = true;
    if (u.claimed) {
      if (u.len > 0) std::memcpy(u.claimed->data, u.data.data(), u.len);
      Complete(u.claimed, done);
      unexpected_bytes_ -= u.len + kEntryCost;
      unexpected_.erase(rx_unexp_);
    }
  } else if (rx_req_) {
    Complete(rx_req_, done);
  }
  rx_req_ = nullptr;
}

Status P2pChannel::OnHeader(std::vector<P2pRequest*>* done) {
  RM_RETURN_IF_ERROR(CheckP2pHeader(rx_hdr_, limits_.eager_bytes));
  const P2pHeader h = rx_hdr_;
  switch (static_cast<P2pKind>(h.kind)) {
    case P2pKind::kEager:
    case P2pKind::kRts: {
      const bool rts = h.kind == static_cast<uint32_t>(P2pKind::kRts);
      auto posted = FindPosted(h.tag);
      if (posted != posted_.end()) {
        P2pRequest* r = *posted;
        RM_RETURN_IF_ERROR(Claim(r, h.len));
        posted_.erase(posted);
        if (!rts) {
          StartPayload(r->data, h.len, r, {}, false, done);
        } else {
          if (!awaiting_data_.emplace(h.id, r).second) {
            posted_.push_back(r);
            return Internal(fmt::format("offered message {} twice", h.id));
          }
          QueueCts(h.id);
        }
        return Status::Ok();
      }
      const size_t cost = (rts ? 0 : h.len) + kEntryCost;
      if (unexpected_bytes_ + cost > limits_.unexpected_bytes) {
        return ResourceExhausted(fmt::format(
            "sent more than {} bytes of point-to-point messages that no receive has claimed ({} unclaimed, the "
            "oldest with {}; Options::p2p_unexpected_bytes bounds them)",
            limits_.unexpected_bytes, unexpected_.size() + 1,
            TagName(unexpected_.empty() ? h.tag : unexpected_.front().tag)));
      }
      unexpected_bytes_ += cost;
      unexpected_.push_back(Unexpected{h.tag, h.id, rts, h.len, {}, rts, nullptr});
      auto u = std::prev(unexpected_.end());
      if (!rts) {
        u->data.resize(h.len);
        StartPayload(u->data.data(), h.len, nullptr, u, true, done);
      }
      return Status::Ok();
    }
    case P2pKind::kCts: {
      auto it = awaiting_cts_.find(h.id);
      if (it == awaiting_cts_.end()) {
        return Internal(fmt::format("sent a clear-to-send for message {}, which this rank never offered", h.id));
      }
      P2pRequest* r = it->second;
      awaiting_cts_.erase(it);
      tx_data_.push_back({P2pHeader{kP2pMagic, static_cast<uint32_t>(P2pKind::kData), r->tag, h.id, r->len}, r->data,
                          r->len, r});
      return Status::Ok();
    }
    case P2pKind::kData: {
      auto it = awaiting_data_.find(h.id);
      if (it == awaiting_data_.end()) {
        return Internal(fmt::format("sent data for message {}, which this rank never asked for", h.id));
      }
      P2pRequest* r = it->second;
      if (h.len != r->len) {
        return Internal(fmt::format("sent {} bytes of data for message {}, which it offered as {} bytes", h.len, h.id, r->len));
      }
      awaiting_data_.erase(it);
      StartPayload(r->data, h.len, r, {}, false, done);
      return Status::Ok();
    }
    case P2pKind::kBye:
      left_ = true;
      if (Pending()) return Unavailable("left the group while this rank still needed it");
      return Status::Ok();
  }
  return Internal("unreachable");
}

std::vector<P2pRequest*> P2pChannel::TakePending() {
  std::vector<P2pRequest*> out(posted_.begin(), posted_.end());
  for (auto& [id, r] : awaiting_data_) out.push_back(r);
  for (auto& [id, r] : awaiting_cts_) out.push_back(r);
  if (tx_cur_ && tx_cur_->completes) out.push_back(tx_cur_->completes);
  for (auto& f : tx_data_) {
    if (f.completes) out.push_back(f.completes);
  }
  for (auto& u : unexpected_) {
    if (u.claimed) out.push_back(u.claimed);
  }
  if (rx_ == Rx::kPayload && !rx_into_unexpected_ && rx_req_) out.push_back(rx_req_);
  posted_.clear();
  awaiting_data_.clear();
  awaiting_cts_.clear();
  tx_cur_.reset();
  tx_ctrl_.clear();
  tx_data_.clear();
  for (auto& u : unexpected_) u.claimed = nullptr;
  rx_req_ = nullptr;
  outstanding_ = 0;
  return out;
}

bool P2pChannel::SayGoodbye() {
  if (WantsWrite()) return false;  // mid-frame: a goodbye cannot go now
  P2pHeader bye{kP2pMagic, static_cast<uint32_t>(P2pKind::kBye), 0, 0, 0};
  iovec iov{&bye, sizeof bye};
  auto w = pair_->TryWrite(&iov, 1);
  return w.ok() && *w == sizeof bye;
}

}  // namespace ringmaster::comm
