// Fuzz target `comm_store`: the TcpStore server's request handling
// (store_protocol.h) fed arbitrary bytes from several clients at once, as
// another process may send. Half the runs have a job secret: clients must
// first answer the challenge (the input decides whether a client answers it
// rightly, wrongly or not at all). No input may crash it; every reply is a
// well-formed frame addressed to a client that exists; nothing but the
// challenge and the proof reaches a client that has not proven the secret;
// the queued replies stay within the budget; a malformed request drops its
// client, which starts afresh.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "comm/auth.h"
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

// Chunks of the input from up to four clients, each accepted with a fixed
// nonce; a small budget so that it binds.
void FeedClients(std::string_view all, bool with_secret) {
  const auto* data = reinterpret_cast<const uint8_t*>(all.data());
  const size_t size = all.size();
  const std::string secret = with_secret ? "s3cret" : "";
  constexpr size_t kBudget = 4096;
  StoreCore core(secret, kBudget);
  auto nonce = [](int client) { return std::string(kNonceBytes, static_cast<char>('a' + client)); };
  StoreCore::Output out;
  for (int c = 0; c < 4; ++c) core.Accept(c, nonce(c), &out);
  auto check = [&](StoreCore::Output& o) {
    std::set<int> dropped;
    for (const auto& d : o.dropped) dropped.insert(d.client);
    for (const auto& r : o.replies) {
      Check(r.client >= 0 && r.client < 4);
      if (r.bytes.compare(0, 4, kStoreChallengeMagic) == 0 || r.bytes.compare(0, 4, kStoreProofMagic) == 0) {
        Check(with_secret && r.bytes.size() == kStoreChallengeBytes);
      } else {
        Check(core.authenticated(r.client) || !with_secret || dropped.count(r.client));
        CheckReply(r.bytes);
      }
    }
    for (const auto& d : o.dropped) Check(d.client >= 0 && d.client < 4 && !d.reason.empty());
    // Beyond the budget only by one reply, which alone may be larger.
    Check(core.queued_bytes() <= kBudget + 9 + kMaxStoreValueBytes);
    o = {};
  };
  check(out);
  size_t at = 0;
  while (at + 2 <= size) {
    const int client = data[at] % 4;
    const size_t len = std::min<size_t>(data[at + 1] + 1, size - at - 2);
    if (with_secret && (data[at] & 0x40) && !core.authenticated(client)) {
      // A client that knows the secret answers (bit 0x20: a wrong answer).
      const std::string challenge = std::string(kStoreChallengeMagic) + nonce(client);
      core.Feed(client, EncodeStoreAuth((data[at] & 0x20) ? "wrong" : secret, challenge, nonce(client + 4)), &out);
    } else {
      core.Feed(client, all.substr(at + 2, len), &out);
    }
    check(out);
    if (data[at] & 0x10) {  // the kernel took some of its replies
      core.Sent(client, data[at + 1] * 64, &out);
      check(out);
    }
    if (data[at] & 0x80) {  // a client goes away mid-request, and another takes its place
      core.Drop(client);
      core.Accept(client, nonce(client), &out);
      check(out);
    }
    at += 2 + len;
  }
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
  // The server's state, open and with a secret.
  FeedClients(all, false);
  FeedClients(all, true);
  return 0;
}
