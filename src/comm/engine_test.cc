// ringcomm without sockets: every algorithm and point to point over the
// in-memory FakeMesh (ranks as threads), the point-to-point channel's state
// machine fed hostile frames through a fake pair, and the store's request
// parser. Fast and deterministic in what they check; no ports, no /dev/shm.
#include <gtest/gtest.h>

#include <cstring>
#include <latch>
#include <thread>

#include <fmt/format.h>

#include "comm/context.h"
#include "comm/fake_pair.h"
#include "comm/p2p.h"
#include "comm/store_protocol.h"
#include "comm/wire.h"

namespace ringmaster::comm {
namespace {

using namespace std::chrono_literals;

// N ranks as threads over one FakeMesh; fn(ctx) returns failures.
template <typename F>
std::vector<std::string> OnFakeMesh(int world, const Options& o, FakeOptions fo, F fn) {
  FakeMesh mesh(world, o.streams, fo);
  std::vector<std::vector<std::string>> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r, links = mesh.Take(r)]() mutable {
      auto ctx = Context::FromLinks(r, world, o, std::move(links));
      if (!ctx.ok()) {
        results[r] = {ctx.status().ToString()};
        return;
      }
      results[r] = fn(**ctx);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::string> all;
  for (int r = 0; r < world; ++r) {
    for (auto& f : results[r]) all.push_back(fmt::format("rank {}: {}", r, f));
  }
  return all;
}

Options FakeOptionsFor(size_t chunk) {
  Options o;
  o.timeout = 20s;
  o.chunk_bytes = chunk;
  return o;
}

TEST(FakeMesh, EveryAlgorithmMatchesTheReference) {
  for (int world : {2, 3, 5}) {
    for (size_t max_io : {size_t{0}, size_t{7}}) {
      const std::vector<size_t> counts = max_io ? std::vector<size_t>{1, 7, 1001} : std::vector<size_t>{1, 7, 1001, 100003};
      auto failures = OnFakeMesh(world, FakeOptionsFor(4096), {64 << 10, max_io}, [&](Context& c) {
        std::vector<std::string> f;
        const int n = c.size(), r = c.rank();
        for (size_t count : counts) {
          auto expect_sum = [&](const std::vector<int32_t>& v, const std::string& what) {
            for (size_t i = 0; i < v.size(); ++i) {
              int32_t want = static_cast<int32_t>(n * i + n * (n - 1) / 2);
              if (v[i] != want) {
                f.push_back(fmt::format("{} count {}: [{}] = {}, want {}", what, count, i, v[i], want));
                return;
              }
            }
          };
          for (Algorithm a : {Algorithm::kRing, Algorithm::kRecursiveDoubling, Algorithm::kParameterServer}) {
            std::vector<int32_t> v(count);
            for (size_t i = 0; i < count; ++i) v[i] = static_cast<int32_t>(i) + r;
            if (Status st = c.AllReduce(v.data(), v.data(), count, DataType::kInt32, ReduceOp::kSum, a); !st.ok()) {
              f.push_back(st.ToString());
            }
            expect_sum(v, AlgorithmName(a));
          }
          std::vector<int32_t> full(count * n), mine(count);
          for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<int32_t>(i % count) + r;
          if (Status st = c.ReduceScatter(full.data(), mine.data(), count, DataType::kInt32, ReduceOp::kSum); !st.ok()) {
            f.push_back(st.ToString());
          }
          expect_sum(mine, "reduce_scatter");
          std::vector<int32_t> gathered(count * n);
          std::vector<int32_t> own(count, r);
          if (Status st = c.AllGather(own.data(), gathered.data(), count, DataType::kInt32); !st.ok()) f.push_back(st.ToString());
          for (size_t i = 0; i < gathered.size(); ++i) {
            if (gathered[i] != static_cast<int32_t>(i / count)) {
              f.push_back(fmt::format("allgather count {}: [{}] = {}", count, i, gathered[i]));
              break;
            }
          }
          std::vector<int32_t> b(count, r == n - 1 ? 42 : 0);
          if (Status st = c.Broadcast(b.data(), count, DataType::kInt32, n - 1); !st.ok()) f.push_back(st.ToString());
          if (b != std::vector<int32_t>(count, 42)) f.push_back(fmt::format("broadcast count {}", count));
          std::vector<int32_t> in(count), out(count);
          for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(i) + r;
          if (Status st = c.Reduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum, 1); !st.ok()) {
            f.push_back(st.ToString());
          }
          if (r == 1) expect_sum(out, "reduce");
        }
        if (Status st = c.Barrier(); !st.ok()) f.push_back(st.ToString());
        return f;
      });
      for (const auto& f : failures) ADD_FAILURE() << "world " << world << " max_io " << max_io << ": " << f;
    }
  }
}

TEST(FakeMesh, TagsMatchOverFakePairs) {
  Options o = FakeOptionsFor(4096);
  o.p2p_eager_bytes = 1024;  // the larger messages go by offer and clear-to-send
  auto failures = OnFakeMesh(2, o, {4096, 5}, [](Context& c) {
    std::vector<std::string> f;
    const int peer = 1 - c.rank();
    for (size_t n : {size_t{3}, size_t{5000}}) {
      std::vector<std::vector<int32_t>> out;
      std::vector<std::shared_ptr<Work>> sends;
      for (int tag = 0; tag < 4; ++tag) out.emplace_back(n, c.rank() * 100 + tag);
      for (int tag = 0; tag < 4; ++tag) sends.push_back(c.SendAsync(out[tag].data(), n, DataType::kInt32, peer, tag));
      for (int tag : {3, 0, 2, 1}) {
        std::vector<int32_t> got(n);
        if (Status st = c.Recv(got.data(), n, DataType::kInt32, peer, tag); !st.ok()) f.push_back(st.ToString());
        if (got != std::vector<int32_t>(n, peer * 100 + tag)) f.push_back(fmt::format("n={} tag {} got {}", n, tag, got[0]));
      }
      for (auto& s : sends) {
        if (Status st = s->Wait(); !st.ok()) f.push_back(st.ToString());
      }
    }
    return f;
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
}

TEST(FakeMesh, APeerThatLeavesMidCollectiveIsNamed) {
  // The survivors stay until both have their answer: one that tore down
  // first would be, rightly, the departed peer the other names.
  std::latch both_answered(2);
  auto failures = OnFakeMesh(3, FakeOptionsFor(4096), {4096, 0}, [&](Context& c) -> std::vector<std::string> {
    if (c.rank() == 2) return {};  // it leaves at once: its Context says goodbye
    std::vector<float> v(100000, 1.0f);
    Status st = c.AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum, Algorithm::kRing);
    both_answered.arrive_and_wait();
    if (st.message().find("rank 2 (host fake, pid 1002)") == std::string::npos) return {st.ToString()};
    return {};
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
}

// The messenger's interleaving, forced: in a ring of four, rank 3 leaves;
// rank 0 notices while it is in the middle of a frame to rank 1, whose pipe
// is full because rank 1 is late. Rank 1 has no lane to rank 3 in a ring,
// so it can only learn the cause from rank 0: rank 0 must finish the frame
// and deliver its failure notice before it breaks the link, or rank 1 would
// name rank 0, which is alive and merely failing. (Rank 2, rank 1's other
// neighbour, could tell it too: it comes later still.)
TEST(FakeMesh, ALateRankHearsTheCauseNotTheMessenger) {
  auto failures = OnFakeMesh(4, FakeOptionsFor(4096), {4096, 0}, [&](Context& c) -> std::vector<std::string> {
    if (c.rank() == 3) return {};
    // Late: rank 0 has failed by the time rank 1 comes, its frame to rank 1
    // half sent; rank 2 comes later still, so it cannot tell rank 1 first.
    if (c.rank() == 1) std::this_thread::sleep_for(200ms);
    if (c.rank() == 2) std::this_thread::sleep_for(400ms);
    std::vector<float> v(100000, 1.0f);
    Status st = c.AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum, Algorithm::kRing);
    if (st.message().find("rank 3 (host fake, pid 1003)") == std::string::npos) return {st.ToString()};
    return {};
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
}

// ---- the point-to-point channel fed frames by a hostile peer

struct ChannelRig {
  FakeDoorbell a_bell, b_bell;
  std::unique_ptr<Pair> mine, theirs;
  std::unique_ptr<P2pChannel> channel;
  ChannelRig(P2pLimits limits = {}) {
    auto [a, b] = MakeFakePairs(&a_bell, &b_bell, {1 << 20, 0});
    mine = std::move(a);
    theirs = std::move(b);
    channel = std::make_unique<P2pChannel>(mine.get(), limits);
  }
  void Send(const P2pHeader& h, const std::string& payload = "") {
    iovec iov[2] = {{const_cast<P2pHeader*>(&h), sizeof h}, {const_cast<char*>(payload.data()), payload.size()}};
    ASSERT_EQ(theirs->TryWrite(iov, 2).value(), sizeof h + payload.size());
  }
  Status Pump(std::vector<P2pRequest*>* done) {
    bool moved = false;
    return channel->Progress(&moved, done);
  }
};

P2pHeader Frame(P2pKind kind, int64_t tag, uint64_t id, uint64_t len) {
  return P2pHeader{kP2pMagic, static_cast<uint32_t>(kind), tag, id, len};
}

TEST(P2pChannel, MatchesByTagInArrivalOrder) {
  ChannelRig rig;
  rig.Send(Frame(P2pKind::kEager, 1, 0, 4), "AAAA");
  rig.Send(Frame(P2pKind::kEager, 2, 1, 4), "BBBB");
  rig.Send(Frame(P2pKind::kEager, 1, 2, 4), "CCCC");
  std::vector<P2pRequest*> done;
  ASSERT_TRUE(rig.Pump(&done).ok());
  EXPECT_TRUE(done.empty());
  EXPECT_EQ(rig.channel->unexpected_bytes(), 12u + 3 * 256);
  char b1[4], b2[4], b3[4];
  P2pRequest r2{false, 0, 2, b2, 4}, r1{false, 0, 1, b1, 4}, r3{false, 0, 1, b3, 4};
  for (P2pRequest* r : {&r2, &r1, &r3}) ASSERT_TRUE(rig.channel->PostRecv(r, &done).ok());
  EXPECT_EQ(done.size(), 3u);
  EXPECT_EQ(std::string(b2, 4), "BBBB");
  EXPECT_EQ(std::string(b1, 4), "AAAA");
  EXPECT_EQ(std::string(b3, 4), "CCCC");
  EXPECT_EQ(rig.channel->unexpected_bytes(), 0u);
  EXPECT_FALSE(rig.channel->Pending());
}

TEST(P2pChannel, AnOfferWaitsForItsReceiveThenAnswers) {
  ChannelRig rig;
  rig.Send(Frame(P2pKind::kRts, 7, 0, 100000));
  std::vector<P2pRequest*> done;
  ASSERT_TRUE(rig.Pump(&done).ok());
  std::vector<char> buf(100000);
  P2pRequest r{false, 0, 7, buf.data(), buf.size()};
  ASSERT_TRUE(rig.channel->PostRecv(&r, &done).ok());
  ASSERT_TRUE(rig.Pump(&done).ok());
  P2pHeader cts{};
  iovec iov{&cts, sizeof cts};
  ASSERT_EQ(rig.theirs->TryRead(&iov, 1).value(), sizeof cts);
  EXPECT_EQ(cts.kind, static_cast<uint32_t>(P2pKind::kCts));
  EXPECT_EQ(cts.id, 0u);
  rig.Send(Frame(P2pKind::kData, 7, 0, 100000), std::string(100000, 'z'));
  ASSERT_TRUE(rig.Pump(&done).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(buf[99999], 'z');
}

TEST(P2pChannel, HostileFramesAreErrorsNotCrashes) {
  struct Case {
    P2pHeader h;
    std::string want;
  };
  const std::vector<Case> cases = {
      {P2pHeader{0xdeadbeef, 1, 0, 0, 0}, "bad magic 0xdeadbeef"},
      {P2pHeader{kP2pMagic, 99, 0, 0, 0}, "unknown kind 99"},
      {Frame(P2pKind::kEager, 0, 0, 1 << 30), "above the eager limit"},
      {Frame(P2pKind::kRts, 0, 0, uint64_t{1} << 62), "more than any message can hold"},
      {Frame(P2pKind::kCts, 0, 5, 0), "clear-to-send for message 5, which this rank never offered"},
      {Frame(P2pKind::kData, 0, 9, 10), "data for message 9, which this rank never asked for"},
      {Frame(P2pKind::kBye, 0, 0, 3), "goodbye frame with a length of 3"},
  };
  for (const auto& c : cases) {
    ChannelRig rig;
    rig.Send(c.h);
    std::vector<P2pRequest*> done;
    Status st = rig.Pump(&done);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find(c.want), std::string::npos) << st.ToString();
  }
}

TEST(P2pChannel, UnclaimedBytesAreBounded) {
  ChannelRig rig({1024, 4096, 0});
  for (int i = 0; i < 8; ++i) rig.Send(Frame(P2pKind::kEager, i, i, 1000), std::string(1000, 'x'));
  std::vector<P2pRequest*> done;
  Status st = rig.Pump(&done);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_LE(rig.channel->unexpected_bytes(), 4096u);
}

TEST(P2pChannel, AGoodbyeWithAReceivePendingIsAnError) {
  ChannelRig rig;
  char b[4];
  P2pRequest r{false, 0, 1, b, 4};
  std::vector<P2pRequest*> done;
  ASSERT_TRUE(rig.channel->PostRecv(&r, &done).ok());
  rig.Send(Frame(P2pKind::kBye, 0, 0, 0));
  Status st = rig.Pump(&done);
  EXPECT_EQ(st.message(), "left the group while this rank still needed it");
  auto pending = rig.channel->TakePending();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0], &r);
}

TEST(P2pChannel, ASizeMismatchNamesBothSizes) {
  ChannelRig rig;
  rig.Send(Frame(P2pKind::kEager, 3, 0, 8), "12345678");
  std::vector<P2pRequest*> done;
  ASSERT_TRUE(rig.Pump(&done).ok());
  char b[4];
  P2pRequest r{false, 0, 3, b, 4};
  Status st = rig.channel->PostRecv(&r, &done);
  EXPECT_EQ(st.message(), "sent 8 bytes with tag 3 where this rank expected 4 (do both ranks pass buffers of the same size?)");
}

// ---- the store's request parser and state

TEST(StoreProtocol, ParsesWholeRequestsAndRejectsImpossibleOnes) {
  StoreRequest req;
  size_t used = 0;
  std::string err;
  std::string set = EncodeStoreRequest(kStoreSet, "key", "value");
  for (size_t cut = 0; cut < set.size(); ++cut) {
    EXPECT_EQ(ParseStoreRequest(std::string_view(set).substr(0, cut), &req, &used, &err), StoreParse::kNeedMore) << cut;
  }
  ASSERT_EQ(ParseStoreRequest(set + "trailing", &req, &used, &err), StoreParse::kOk);
  EXPECT_EQ(used, set.size());
  EXPECT_EQ(req.key, "key");
  EXPECT_EQ(req.value, "value");
  EXPECT_EQ(ParseStoreRequest(std::string("\x09", 1), &req, &used, &err), StoreParse::kBad);
  std::string long_key = EncodeStoreRequest(kStoreGet, std::string(kMaxStoreKeyBytes + 1, 'k'), "");
  EXPECT_EQ(ParseStoreRequest(std::string_view(long_key).substr(0, 5), &req, &used, &err), StoreParse::kBad);
  EXPECT_NE(err.find("a key of 4097 bytes"), std::string::npos) << err;
}

TEST(StoreProtocol, CoreAnswersWaitersAndRefusesBadAdds) {
  StoreCore core;
  StoreCore::Output out;
  core.Feed(1, EncodeStoreRequest(kStoreGet, "k", ""), &out);
  EXPECT_TRUE(out.replies.empty());  // waits for the key
  core.Feed(2, EncodeStoreRequest(kStoreSet, "k", "v"), &out);
  ASSERT_EQ(out.replies.size(), 2u);
  EXPECT_EQ(out.replies[0].client, 1);
  EXPECT_EQ(out.replies[0].bytes, EncodeStoreReply(kStoreOk, "v"));
  out = {};
  core.Feed(3, EncodeStoreRequest(kStoreAdd, "k", "1"), &out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(out.replies[0].bytes[0], kStoreError);
  core.Sent(3, out.replies[0].bytes.size(), &out);
  out = {};
  core.Feed(3, EncodeStoreRequest(kStoreAdd, "n", "9223372036854775807"), &out);
  core.Sent(3, out.replies[0].bytes.size(), &out);
  core.Feed(3, EncodeStoreRequest(kStoreAdd, "n", "1"), &out);
  ASSERT_EQ(out.replies.size(), 2u);
  EXPECT_EQ(out.replies[1].bytes, EncodeStoreReply(kStoreError, "add: the sum overflows"));
  core.Feed(4, std::string("\x05", 1), &out);
  ASSERT_EQ(out.dropped.size(), 1u);
  EXPECT_EQ(out.dropped[0].client, 4);
}

}  // namespace
}  // namespace ringmaster::comm
