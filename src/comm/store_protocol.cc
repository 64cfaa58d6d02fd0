#include "comm/store_protocol.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>

#include <fmt/format.h>

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

bool StoreCore::Feed(int client, std::string_view bytes, std::vector<Reply>* replies, std::string* error) {
  std::string& in = input_[client];
  in.append(bytes);
  size_t at = 0;
  while (true) {
    StoreRequest req;
    size_t consumed = 0;
    StoreParse p = ParseStoreRequest(std::string_view(in).substr(at), &req, &consumed, error);
    if (p == StoreParse::kNeedMore) break;
    if (p == StoreParse::kBad) {
      Drop(client);
      return false;
    }
    at += consumed;
    Serve(client, req, replies);
  }
  in.erase(0, at);
  return true;
}

void StoreCore::Serve(int client, const StoreRequest& req, std::vector<Reply>* replies) {
  switch (req.op) {
    case kStoreSet: {
      Store(req.key, req.value, replies);
      // A full store answers with an error, and the key is unchanged.
      if (data_.count(req.key) && data_[req.key] == req.value) {
        replies->push_back({client, EncodeStoreReply(kStoreOk, "")});
      } else {
        replies->push_back({client, EncodeStoreReply(kStoreError, fmt::format("store is full ({} bytes)", kMaxStoreBytes))});
      }
      return;
    }
    case kStoreGet: {
      auto it = data_.find(req.key);
      if (it != data_.end()) replies->push_back({client, EncodeStoreReply(kStoreOk, it->second)});
      else waiting_[req.key].push_back(client);
      return;
    }
    case kStoreAdd: {
      int64_t delta = 0, cur = 0;
      if (!ParseInt(req.value, &delta)) {
        replies->push_back({client, EncodeStoreReply(kStoreError, "add: the increment is not an integer")});
        return;
      }
      auto it = data_.find(req.key);
      if (it != data_.end() && !ParseInt(it->second, &cur)) {
        replies->push_back({client, EncodeStoreReply(kStoreError, "add: the key holds something that is not an integer")});
        return;
      }
      if ((delta > 0 && cur > std::numeric_limits<int64_t>::max() - delta) ||
          (delta < 0 && cur < std::numeric_limits<int64_t>::min() - delta)) {
        replies->push_back({client, EncodeStoreReply(kStoreError, "add: the sum overflows")});
        return;
      }
      std::string v = std::to_string(cur + delta);
      Store(req.key, v, replies);
      if (data_.count(req.key) && data_[req.key] == v) {
        replies->push_back({client, EncodeStoreReply(kStoreOk, v)});
      } else {
        replies->push_back({client, EncodeStoreReply(kStoreError, fmt::format("store is full ({} bytes)", kMaxStoreBytes))});
      }
      return;
    }
  }
}

void StoreCore::Store(const std::string& key, std::string value, std::vector<Reply>* replies) {
  auto it = data_.find(key);
  size_t old = it == data_.end() ? 0 : key.size() + it->second.size();
  size_t now = data_bytes_ - old + key.size() + value.size();
  if (now > kMaxStoreBytes) return;
  data_bytes_ = now;
  auto w = waiting_.find(key);
  if (w != waiting_.end()) {
    for (int c : w->second) replies->push_back({c, EncodeStoreReply(kStoreOk, value)});
    waiting_.erase(w);
  }
  data_[key] = std::move(value);
}

void StoreCore::Drop(int client) {
  input_.erase(client);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    std::erase(it->second, client);
    it = it->second.empty() ? waiting_.erase(it) : std::next(it);
  }
}

}  // namespace ringmaster::comm
