// Fuzz target `comm_store`: the TcpStore server's request handling
// (store_protocol.h) fed arbitrary bytes from several clients at once, as
// any process on the host may send. No input may crash it; every reply is a
// well-formed frame addressed to a client that exists; a client whose
// request is malformed is dropped and starts afresh; the parser never asks
// for more bytes than the limits allow.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "comm/store_protocol.h"

namespace {

using namespace ringmaster::comm;

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckReply(const std::string& r) {
  Check(r.size() >= 9);
  Check(r[0] == kStoreOk || r[0] == kStoreError);
  uint64_t n;
  std::memcpy(&n, r.data() + 1, 8);
  Check(n == r.size() - 9);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  // The parser alone, on the whole input.
  {
    StoreRequest req;
    size_t used = 0;
    std::string err;
    StoreParse p = ParseStoreRequest(all, &req, &used, &err);
    if (p == StoreParse::kOk) Check(used <= size && req.key.size() <= kMaxStoreKeyBytes && req.value.size() <= kMaxStoreValueBytes);
    if (p == StoreParse::kBad) Check(!err.empty());
  }
  // The server's state: chunks of the input from up to four clients.
  StoreCore core;
  size_t at = 0;
  while (at + 2 <= size) {
    const int client = data[at] % 4;
    const size_t len = std::min<size_t>(data[at + 1] + 1, size - at - 2);
    std::vector<StoreCore::Reply> replies;
    std::string err;
    const bool kept = core.Feed(client, all.substr(at + 2, len), &replies, &err);
    if (!kept) Check(!err.empty());
    for (const auto& r : replies) {
      Check(r.client >= 0 && r.client < 4);
      CheckReply(r.bytes);
    }
    if (data[at] & 0x80) core.Drop(client);  // a client goes away mid-request
    at += 2 + len;
  }
  return 0;
}
