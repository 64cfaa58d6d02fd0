// Fuzz target `comm_frame`: ringcomm's wire decoding fed arbitrary bytes as
// if a peer (or a stranger that got through) had sent them.
//
// Mode 0 drives the point-to-point channel (p2p.h) through a fake pair: the
// input is a script that interleaves posting sends and receives (any tag,
// any size up to 1 KiB) with delivering input bytes as the peer's stream. No
// input may crash it, and the requests must stay accounted for: every one
// completes once or is handed back by TakePending, never both, never lost;
// unclaimed bytes stay within their bound.
// Mode 1 feeds the bytes to the collective engine (progress_engine.h) as
// the stream from rank 1 while it receives one message: the engine must
// finish (an error naming rank 1, or the message) without hanging.
// Mode 2 is an accepting rank's checks of a TCP hello with the job's secret
// (wire.h, auth.h): a hello, the dialer's nonce and its proof as a stranger
// sends them. A hello that passes names a rank and channel that exist; a
// proof passes exactly when it is the dialer's proof of that transcript.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "comm/auth.h"
#include "comm/fake_pair.h"
#include "comm/failure.h"
#include "comm/p2p.h"
#include "comm/progress_engine.h"
#include "comm/wire.h"

namespace {

using namespace ringmaster;
using namespace ringmaster::comm;

struct Input {
  const uint8_t* p;
  size_t n;
  bool empty() const { return n == 0; }
  uint8_t Byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  std::string Bytes(size_t k) {
    k = std::min(k, n);
    std::string s(reinterpret_cast<const char*>(p), k);
    p += k;
    n -= k;
    return s;
  }
};

void Check(bool ok) {
  if (!ok) std::abort();
}

void FuzzChannel(Input in) {
  FakeDoorbell a_bell, b_bell;
  auto [mine, theirs] = MakeFakePairs(&a_bell, &b_bell, {1 << 20, static_cast<size_t>(in.Byte() % 8)});
  const P2pLimits limits{static_cast<size_t>(64 + in.Byte() * 16), static_cast<size_t>(4096 + in.Byte() * 64), 0};
  P2pChannel channel(mine.get(), limits);
  std::vector<std::unique_ptr<P2pRequest>> reqs;
  std::vector<std::unique_ptr<std::vector<char>>> bufs;
  std::set<P2pRequest*> done;
  auto account = [&](const std::vector<P2pRequest*>& completed) {
    for (P2pRequest* r : completed) Check(done.insert(r).second);  // completes once
  };
  Status st;
  while (!in.empty() && st.ok()) {
    const uint8_t op = in.Byte();
    switch (op % 4) {
      case 0: {  // the peer's bytes arrive
        std::string bytes = in.Bytes(in.Byte() + 1);
        iovec iov{bytes.data(), bytes.size()};
        (void)theirs->TryWrite(&iov, 1);
        break;
      }
      case 1:
      case 2: {  // a receive or a send is posted
        const bool send = op % 4 == 2;
        const size_t len = static_cast<size_t>(in.Byte()) << 2;  // up to 1 KiB: frames split byte by byte stay quick
        bufs.push_back(std::make_unique<std::vector<char>>(len + 1));
        reqs.push_back(std::make_unique<P2pRequest>(P2pRequest{send, 1, in.Byte() % 4, bufs.back()->data(), len}));
        if (send) {
          channel.PostSend(reqs.back().get());
        } else {
          std::vector<P2pRequest*> completed;
          st = channel.PostRecv(reqs.back().get(), &completed);
          account(completed);
        }
        break;
      }
      case 3: {  // the peer reads what this side wrote
        char sink[8192];
        iovec iov{sink, sizeof sink};
        (void)theirs->TryRead(&iov, 1);
        break;
      }
    }
    if (!st.ok()) break;
    bool moved = false;
    std::vector<P2pRequest*> completed;
    st = channel.Progress(&moved, &completed);
    account(completed);
    Check(channel.unexpected_bytes() <= limits.unexpected_bytes);
  }
  theirs.reset();  // the peer goes
  if (st.ok()) {
    bool moved = false;
    std::vector<P2pRequest*> completed;
    (void)channel.Progress(&moved, &completed);
    account(completed);
  }
  std::set<P2pRequest*> pending;
  for (P2pRequest* r : channel.TakePending()) {
    Check(pending.insert(r).second);
    Check(!done.count(r));
  }
  Check(done.size() + pending.size() == reqs.size());
  Check(!channel.Pending());
}

void FuzzCollective(Input in) {
  FakeDoorbell a_bell, b_bell;
  auto [mine, theirs] = MakeFakePairs(&a_bell, &b_bell, {1 << 20, static_cast<size_t>(in.Byte() % 8)});
  Options o;
  o.timeout = std::chrono::milliseconds(200);
  const size_t len = (static_cast<size_t>(in.Byte()) << 8 | in.Byte()) % 1025;
  const bool also_send = in.Byte() & 1;
  std::string bytes = in.Bytes(in.n);
  iovec iov{bytes.data(), bytes.size()};
  (void)theirs->TryWrite(&iov, 1);
  theirs->Shutdown(/*clean=*/true);  // nothing more will come
  Failure failure(nullptr, "rank 0", nullptr);
  std::vector<std::vector<std::unique_ptr<Pair>>> lanes(2);
  lanes[1].push_back(std::move(mine));
  Engine engine(0, 2, o, std::move(lanes), &failure, [](int r) { return "rank " + std::to_string(r); });
  std::vector<char> buf(len + 1), out(len + 1, 'x');
  Check(engine.Begin("fuzz").ok());
  Engine::Msg* r = engine.Post(1, false, buf.data(), len);
  Engine::Msg* s = also_send ? engine.Post(1, true, out.data(), len) : nullptr;
  Status st = engine.WaitAll({r, s});
  // An error is this operation's, and names rank 1 or relays the cause rank 1 sent.
  if (!st.ok()) Check(st.message().rfind("fuzz: ", 0) == 0 && st.message().size() > 6);
  engine.End();
}

void FuzzHello(Input in) {
  if (in.n < sizeof(Hello)) return;
  Hello h;
  std::memcpy(&h, in.Bytes(sizeof(Hello)).data(), sizeof h);
  const int rank = in.Byte() % 4, size = rank + 1 + in.Byte() % 4, streams = 1 + in.Byte() % 4, generation = in.Byte() % 3;
  if (CheckHello(h, rank, size, streams, generation).ok()) {
    Check(h.rank > rank && h.rank < size && h.generation == generation);
    Check(h.channel == kP2pChannel || (h.channel >= 0 && h.channel < streams));
  }
  const std::string secret = "s3cret", acceptor_nonce(kNonceBytes, 'a');
  const std::string dialer_nonce = in.Bytes(kNonceBytes);
  const std::string transcript = HelloTranscript(h, dialer_nonce, acceptor_nonce);
  const std::string sent = in.Bytes(kProofBytes);
  const std::string right = MakeProof(secret, ProofRole::kHelloDialer, transcript);
  Check(CheckProof(secret, ProofRole::kHelloDialer, transcript, sent) == (sent == right));
  Check(CheckProof(secret, ProofRole::kHelloDialer, transcript, right));
  // The acceptor's own proof, reflected, is no dialer's.
  Check(!CheckProof(secret, ProofRole::kHelloDialer, transcript, MakeProof(secret, ProofRole::kHelloAcceptor, transcript)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Input in{data + 1, size - 1};
  switch (data[0] % 3) {
    case 0: FuzzChannel(in); break;
    case 1: FuzzCollective(in); break;
    default: FuzzHello(in); break;
  }
  return 0;
}
