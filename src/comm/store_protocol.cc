#include "comm/store_protocol.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "comm/auth.h"

namespace ringmaster::comm {
namespace {

bool ParseInt(std::string_view s, int64_t* v) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::string EncodeStoreRequest(uint8_t op, std::string_view key, std::string_view value) {
  std::string f(kStoreRequestHeader + key.size() + value.size(), '\0');
  f[0] = static_cast<char>(op);
  uint32_t kl = static_cast<uint32_t>(key.size());
  uint64_t vl = value.size();
  std::memcpy(&f[1], &kl, 4);
  std::memcpy(&f[5], key.data(), key.size());
  std::memcpy(&f[5 + key.size()], &vl, 8);
  std::memcpy(&f[13 + key.size()], value.data(), value.size());
  return f;
}

std::string EncodeStoreReply(uint8_t status, std::string_view value) {
  std::string r(9 + value.size(), '\0');
  r[0] = static_cast<char>(status);
  uint64_t n = value.size();
  std::memcpy(&r[1], &n, 8);
  std::memcpy(&r[9], value.data(), value.size());
  return r;
}

StoreParse ParseStoreRequest(std::string_view buf, StoreRequest* req, size_t* consumed, std::string* error) {
  if (buf.empty()) return StoreParse::kNeedMore;
  const uint8_t op = static_cast<uint8_t>(buf[0]);
  if (op != kStoreSet && op != kStoreGet && op != kStoreAdd) {
    *error = fmt::format("unknown request {} (not a ringcomm store client?)", op);
    return StoreParse::kBad;
  }
  if (buf.size() < 5) return StoreParse::kNeedMore;
  uint32_t kl;
  std::memcpy(&kl, buf.data() + 1, 4);
  if (kl > kMaxStoreKeyBytes) {
    *error = fmt::format("a key of {} bytes (the limit is {})", kl, kMaxStoreKeyBytes);
    return StoreParse::kBad;
  }
  if (buf.size() < 13 + size_t{kl}) return StoreParse::kNeedMore;
  uint64_t vl;
  std::memcpy(&vl, buf.data() + 5 + kl, 8);
  if (vl > kMaxStoreValueBytes) {
    *error = fmt::format("a value of {} bytes (the limit is {})", vl, kMaxStoreValueBytes);
    return StoreParse::kBad;
  }
  if (op != kStoreSet && vl > 32) {
    *error = fmt::format("a {} request with a {}-byte argument", op == kStoreGet ? "get" : "add", vl);
    return StoreParse::kBad;
  }
  const size_t total = kStoreRequestHeader + kl + static_cast<size_t>(vl);
  if (buf.size() < total) return StoreParse::kNeedMore;
  req->op = op;
  req->key.assign(buf.data() + 5, kl);
  req->value.assign(buf.data() + 13 + kl, static_cast<size_t>(vl));
  *consumed = total;
  return StoreParse::kOk;
}

StoreCore::StoreCore(std::string secret, size_t reply_budget)
    : secret_(std::move(secret)), reply_budget_(reply_budget) {}

void StoreCore::Accept(int client, std::string server_nonce, Output* out) {
  Client& c = clients_[client];
  c = Client{};
  c.authenticated = secret_.empty();
  c.nonce = std::move(server_nonce);
  if (!c.authenticated) Queue(client, std::string(kStoreChallengeMagic) + c.nonce, out);
}

bool StoreCore::authenticated(int client) const {
  auto it = clients_.find(client);
  return it != clients_.end() ? it->second.authenticated : secret_.empty();
}

bool StoreCore::wants_input(int client) const {
  auto it = clients_.find(client);
  return it == clients_.end() || it->second.queued == 0;
}

void StoreCore::Feed(int client, std::string_view bytes, Output* out) {
  auto [it, fresh] = clients_.try_emplace(client);
  if (fresh) it->second.authenticated = secret_.empty();
  Client& c = it->second;
  c.input.append(bytes);
  // A client that asks for more than the whole budget without reading
  // (pipelined gets of a large key) will never read it: it goes now.
  if (c.authenticated) {
    size_t owed = c.queued, at = 0;
    StoreRequest req;
    size_t consumed = 0;
    std::string error;
    while (owed <= reply_budget_ &&
           ParseStoreRequest(std::string_view(c.input).substr(at), &req, &consumed, &error) == StoreParse::kOk) {
      owed += ReplySize(req);
      at += consumed;
    }
    if (owed > reply_budget_) {
      ++budget_drops_;
      DropWithReason(client, fmt::format("asked for {}+ bytes of replies without reading them", owed), out);
      return;
    }
  }
  Pump(client, out);
}

void StoreCore::Sent(int client, size_t n, Output* out) {
  auto it = clients_.find(client);
  if (it == clients_.end()) return;
  n = std::min(n, it->second.queued);
  it->second.queued -= n;
  queued_bytes_ -= n;
  if (n == 0) return;
  // Room came free: every client whose request waited for it may go on.
  std::vector<int> ready;
  for (const auto& [id, c] : clients_) {
    if (c.queued == 0 && !c.input.empty()) ready.push_back(id);
  }
  for (int id : ready) {
    if (clients_.count(id)) Pump(id, out);
  }
}

bool StoreCore::Authenticate(int client, Client& c, Output* out) {
  const size_t n = std::min(c.input.size(), kStoreAuthMagic.size());
  if (c.input.compare(0, n, kStoreAuthMagic.substr(0, n)) != 0) {
    DropWithReason(client, "sent a request before proving the job's secret", out);
    return false;
  }
  if (c.input.size() < kStoreAuthBytes) return false;
  const std::string_view msg(c.input.data(), kStoreAuthBytes);
  const std::string_view client_nonce = msg.substr(4, kNonceBytes), proof = msg.substr(4 + kNonceBytes, kProofBytes);
  const std::string transcript = c.nonce + std::string(client_nonce);
  if (c.nonce.size() != kNonceBytes || !CheckProof(secret_, ProofRole::kStoreClient, transcript, proof)) {
    DropWithReason(client, "failed to prove the job's secret", out);
    return false;
  }
  c.authenticated = true;
  c.input.erase(0, kStoreAuthBytes);
  Queue(client, std::string(kStoreProofMagic) + MakeProof(secret_, ProofRole::kStoreServer, transcript), out);
  return true;
}

void StoreCore::Pump(int client, Output* out) {
  if (!clients_[client].authenticated && !Authenticate(client, clients_[client], out)) return;
  // One request at a time per client: the next waits until its reply left,
  // so a client that does not read holds at most one reply here.
  while (true) {
    auto it = clients_.find(client);
    if (it == clients_.end()) return;  // dropped while serving (its own set woke its own get)
    Client& c = it->second;
    if (c.queued > 0) return;
    StoreRequest req;
    size_t consumed = 0;
    std::string error;
    StoreParse p = ParseStoreRequest(c.input, &req, &consumed, &error);
    if (p == StoreParse::kNeedMore) return;
    if (p == StoreParse::kBad) {
      DropWithReason(client, error, out);
      return;  // a malformed request: nothing else it sends can be trusted
    }
    // No room among the queued replies: it waits, unread, for a Sent.
    if (queued_bytes_ > 0 && queued_bytes_ + ReplySize(req) > reply_budget_) return;
    c.input.erase(0, consumed);
    Serve(client, req, out);
  }
}

size_t StoreCore::ReplySize(const StoreRequest& req) const {
  constexpr size_t kSmall = 9 + 128;  // a status and a short error or number
  if (req.op != kStoreGet) return kSmall;
  auto it = data_.find(req.key);
  return it == data_.end() ? 0 : 9 + it->second.size();
}

void StoreCore::Queue(int client, std::string bytes, Output* out) {
  clients_[client].queued += bytes.size();
  queued_bytes_ += bytes.size();
  out->replies.push_back({client, std::move(bytes)});
}

void StoreCore::DropWithReason(int client, std::string reason, Output* out) {
  const bool was_authenticated = authenticated(client);
  Drop(client);
  out->dropped.push_back({client, std::move(reason), was_authenticated});
}

void StoreCore::Serve(int client, const StoreRequest& req, Output* out) {
  switch (req.op) {
    case kStoreSet: {
      Store(req.key, req.value, out);
      // A full store answers with an error, and the key is unchanged.
      if (data_.count(req.key) && data_[req.key] == req.value) {
        Queue(client, EncodeStoreReply(kStoreOk, ""), out);
      } else {
        Queue(client, EncodeStoreReply(kStoreError, fmt::format("store is full ({} bytes)", kMaxStoreBytes)), out);
      }
      return;
    }
    case kStoreGet: {
      auto it = data_.find(req.key);
      if (it != data_.end()) Queue(client, EncodeStoreReply(kStoreOk, it->second), out);
      else waiting_[req.key].push_back(client);
      return;
    }
    case kStoreAdd: {
      int64_t delta = 0, cur = 0;
      if (!ParseInt(req.value, &delta)) {
        Queue(client, EncodeStoreReply(kStoreError, "add: the increment is not an integer"), out);
        return;
      }
      auto it = data_.find(req.key);
      if (it != data_.end() && !ParseInt(it->second, &cur)) {
        Queue(client, EncodeStoreReply(kStoreError, "add: the key holds something that is not an integer"), out);
        return;
      }
      if ((delta > 0 && cur > std::numeric_limits<int64_t>::max() - delta) ||
          (delta < 0 && cur < std::numeric_limits<int64_t>::min() - delta)) {
        Queue(client, EncodeStoreReply(kStoreError, "add: the sum overflows"), out);
        return;
      }
      std::string v = std::to_string(cur + delta);
      Store(req.key, v, out);
      if (data_.count(req.key) && data_[req.key] == v) {
        Queue(client, EncodeStoreReply(kStoreOk, v), out);
      } else {
        Queue(client, EncodeStoreReply(kStoreError, fmt::format("store is full ({} bytes)", kMaxStoreBytes)), out);
      }
      return;
    }
  }
}

void StoreCore::Store(const std::string& key, std::string value, Output* out) {
  auto it = data_.find(key);
  size_t old = it == data_.end() ? 0 : key.size() + it->second.size();
  size_t now = data_bytes_ - old + key.size() + value.size();
  if (now > kMaxStoreBytes) return;
  data_bytes_ = now;
  auto w = waiting_.find(key);
  if (w != waiting_.end()) {
    const std::vector<int> waiters = std::move(w->second);
    waiting_.erase(w);
    for (int c : waiters) {
      if (queued_bytes_ + 9 + value.size() > reply_budget_) {
        // Replies already fill the budget: others stopped reading theirs.
        ++budget_drops_;
        DropWithReason(c, fmt::format("its reply would exceed the {} bytes queued for all clients", reply_budget_), out);
      } else {
        Queue(c, EncodeStoreReply(kStoreOk, value), out);
      }
    }
  }
  data_[key] = std::move(value);
}

void StoreCore::Drop(int client) {
  auto it = clients_.find(client);
  if (it != clients_.end()) {
    queued_bytes_ -= it->second.queued;
    clients_.erase(it);
  }
  for (auto w = waiting_.begin(); w != waiting_.end();) {
    std::erase(w->second, client);
    w = w->second.empty() ? waiting_.erase(w) : std::next(w);
  }
}

std::string EncodeStoreAuth(std::string_view secret, std::string_view challenge, std::string_view client_nonce) {
  const std::string transcript = std::string(challenge.substr(4)) + std::string(client_nonce);
  return std::string(kStoreAuthMagic) + std::string(client_nonce) +
         MakeProof(secret, ProofRole::kStoreClient, transcript);
}

bool CheckStoreServerProof(std::string_view secret, std::string_view challenge, std::string_view client_nonce,
                           std::string_view proof) {
  if (challenge.size() != kStoreChallengeBytes || proof.size() != kStoreProofBytes ||
      proof.substr(0, 4) != kStoreProofMagic) {
    return false;
  }
  const std::string transcript = std::string(challenge.substr(4)) + std::string(client_nonce);
  return CheckProof(secret, ProofRole::kStoreServer, transcript, proof.substr(4));
}

}  // namespace ringmaster::comm
