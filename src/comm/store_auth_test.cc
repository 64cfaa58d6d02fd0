// The job's secret on ringcomm's ports: a stranger who can reach rank 0's
// store or a rank's listener (another user's task on the same host or
// overlay) cannot read or write a key, take a rank's place, or make the
// store queue more replies than its budget; without a secret all runs open.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/auth.h"
#include "comm/context.h"
#include "comm/store.h"
#include "comm/store_protocol.h"
#include "comm/test_sockets.h"
#include "comm/wire.h"

namespace ringmaster::comm {
namespace {

using namespace std::chrono_literals;

const std::string kSecret(64, 'a');

Options GroupOptions(const std::string& secret) {
  Options o;
  o.transport = TransportKind::kTcp;
  o.timeout = 10s;
  o.secret = secret;
  return o;
}

// Rank `rank` of 2 through the store at `port`: "Ok" and the sum of an
// all-reduce of rank+1, or the error.
std::string JoinAndReduce(int port, int rank, const Options& o, float* sum) {
  auto store = TcpStore::Connect("127.0.0.1", port, 10s, o.secret);
  if (!store.ok()) return store.status().ToString();
  auto ctx = Context::Create(store->get(), rank, 2, o);
  if (!ctx.ok()) return ctx.status().ToString();
  *sum = static_cast<float>(rank + 1);
  return (*ctx)->AllReduce(sum, sum, 1, DataType::kFloat32, ReduceOp::kSum).ToString();
}

// Ranks 0 and 1 join through the store at `port` and all-reduce 1 + 2.
void ExpectTwoRanksReduce(int port, const Options& o) {
  std::string out[2];
  float sum[2] = {0, 0};
  std::thread r0([&] { out[0] = JoinAndReduce(port, 0, o, &sum[0]); });
  std::thread r1([&] { out[1] = JoinAndReduce(port, 1, o, &sum[1]); });
  r0.join();
  r1.join();
  EXPECT_EQ(out[0], "Ok");
  EXPECT_EQ(out[1], "Ok");
  EXPECT_EQ(sum[0], 3.0f);
  EXPECT_EQ(sum[1], 3.0f);
}

TEST(StoreAuth, AStrangerCannotWriteARanksRecordBeforeTheRealRank) {
  TcpStoreServerOptions so;
  so.secret = kSecret;
  auto server = TcpStoreServer::Start("127.0.0.1", 0, so).value();
  // The stranger speaks the store's request protocol, as torch's or ours would.
  int stranger = Dial(server->port());
  ASSERT_GE(stranger, 0);
  const std::string forged = EncodeStoreRequest(kStoreSet, "gen/1/rank/1", R"({"host":"evil"})");
  (void)!write(stranger, forged.data(), forged.size());
  auto [got, closed] = ReadFor(stranger, 2s);
  close(stranger);
  EXPECT_TRUE(closed) << "a stranger's connection was kept";
  EXPECT_EQ(got.substr(0, 4), kStoreChallengeMagic) << "nothing but the challenge may reach it";
  EXPECT_EQ(got.size(), kStoreChallengeBytes);
  // A stranger with a wrong secret is refused at connect, naming the store.
  auto wrong = TcpStore::Connect("127.0.0.1", server->port(), 2s, std::string(64, 'b'));
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnauthenticated) << wrong.status().ToString();
  EXPECT_NE(wrong.status().message().find(fmt::format("store 127.0.0.1:{}", server->port())), std::string::npos);

  auto own = TcpStore::Connect("127.0.0.1", server->port(), 2s, kSecret).value();
  EXPECT_EQ(own->Get("gen/1/rank/1", 200ms).status().code(), StatusCode::kDeadlineExceeded) << "the forged key was written";
  // The real ranks form generation 1 and reduce.
  Options o = GroupOptions(kSecret);
  o.generation = 1;
  ExpectTwoRanksReduce(server->port(), o);
  EXPECT_GE(server->stats().refused, 2u);
}

TEST(StoreAuth, AStrangerWithTheAddressCannotGetSetOrAddAndASilentOneIsClosed) {
  TcpStoreServerOptions so;
  so.secret = kSecret;
  so.auth_timeout = 300ms;
  auto server = TcpStoreServer::Start("127.0.0.1", 0, so).value();
  auto own = TcpStore::Connect("127.0.0.1", server->port(), 2s, kSecret).value();
  ASSERT_TRUE(own->Set("k", "secret value", 2s).ok());
  ASSERT_EQ(own->Add("n", 1, 2s).value(), 1);
  for (const std::string& request : {EncodeStoreRequest(kStoreGet, "k", ""), EncodeStoreRequest(kStoreSet, "k", "x"),
                                     EncodeStoreRequest(kStoreAdd, "n", "5")}) {
    int fd = Dial(server->port());
    (void)!write(fd, request.data(), request.size());
    auto [got, closed] = ReadFor(fd, 2s);
    close(fd);
    EXPECT_TRUE(closed);
    EXPECT_EQ(got.find("secret value"), std::string::npos);
    EXPECT_EQ(got.size(), kStoreChallengeBytes) << "it got a reply";
  }
  // A client without the secret is told what is missing.
  auto open = TcpStore::Connect("127.0.0.1", server->port(), 2s).value();
  auto st = open->Get("k", 2s).status();
  EXPECT_EQ(st.code(), StatusCode::kUnauthenticated) << st.ToString();
  EXPECT_NE(st.message().find("RINGMASTER_JOB_SECRET"), std::string::npos) << st.ToString();
  // A stranger that answers the challenge with a made-up proof is closed too.
  int guess = Dial(server->port());
  std::string challenge(kStoreChallengeBytes, '\0');
  ASSERT_EQ(recv(guess, challenge.data(), challenge.size(), MSG_WAITALL), static_cast<ssize_t>(challenge.size()));
  const std::string auth = std::string(kStoreAuthMagic) + std::string(kNonceBytes + kProofBytes, 'x');
  (void)!write(guess, auth.data(), auth.size());
  EXPECT_TRUE(ReadFor(guess, 2s).second);
  close(guess);
  // A silent one is closed after the deadline, and counted.
  const size_t refused = server->stats().refused;
  int silent = Dial(server->port());
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(ReadFor(silent, 3s).second) << "a silent stranger was kept";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  close(silent);
  EXPECT_EQ(server->stats().refused, refused + 1);
  EXPECT_EQ(own->Get("k", 2s).value(), "secret value");
  EXPECT_EQ(own->Add("n", 0, 2s).value(), 1);
}

TEST(StoreAuth, AStrangerCannotPoseAsARankInTheHello) {
  TcpStoreServerOptions so;
  so.secret = kSecret;
  auto server = TcpStoreServer::Start("127.0.0.1", 0, so).value();
  const Options o = GroupOptions(kSecret);
  std::string out[2];
  float sum[2] = {0, 0};
  std::thread r0([&] { out[0] = JoinAndReduce(server->port(), 0, o, &sum[0]); });
  // Rank 0's address, as a stranger watching the host's ports would learn it.
  auto spy = TcpStore::Connect("127.0.0.1", server->port(), 10s, kSecret).value();
  const int port = nlohmann::json::parse(spy->Get("gen/0/rank/0", 10s).value())["port"];
  // It says a perfect hello for rank 1, channel 0, then cannot prove it.
  int stranger = Dial(port);
  const Hello hello{kHelloMagic, 1, 0, 0};
  std::string msg(reinterpret_cast<const char*>(&hello), sizeof hello);
  msg += std::string(kNonceBytes, 'n');
  (void)!write(stranger, msg.data(), msg.size());
  // The real rank 1 comes; rank 0 answers the stranger's hello first (it came first).
  std::thread r1([&] { out[1] = JoinAndReduce(server->port(), 1, o, &sum[1]); });
  timeval wait{10, 0};
  setsockopt(stranger, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  std::string answer(kNonceBytes + kProofBytes, '\0');
  EXPECT_EQ(recv(stranger, answer.data(), answer.size(), MSG_WAITALL), static_cast<ssize_t>(answer.size()));
  const std::string proof(kProofBytes, 'p');
  (void)!write(stranger, proof.data(), proof.size());
  EXPECT_TRUE(ReadFor(stranger, 2s).second) << "the impostor was kept";
  close(stranger);
  r0.join();
  r1.join();
  EXPECT_EQ(out[0], "Ok");
  EXPECT_EQ(out[1], "Ok");
  EXPECT_EQ(sum[0], 3.0f) << "the impostor's value reached the sum";
}

TEST(StoreAuth, ARankWithAnotherSecretCannotJoin) {
  TcpStoreServerOptions so;
  so.secret = kSecret;
  auto server = TcpStoreServer::Start("127.0.0.1", 0, so).value();
  float sum = 0;
  const std::string out = JoinAndReduce(server->port(), 1, GroupOptions(std::string(64, 'c')), &sum);
  EXPECT_NE(out.find("Unauthenticated"), std::string::npos) << out;
}

TEST(StoreBudget, NonReadingClientsKeepTheQueuedRepliesWithinTheBudget) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0).value();
  auto own = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
  ASSERT_TRUE(own->Set("big", std::string(kMaxStoreValueBytes, 'x'), 10s).ok());
  // 20 clients ask for the 16 MiB key and never read: 320 MiB of replies.
  std::vector<int> greedy;
  const std::string get = EncodeStoreRequest(kStoreGet, "big", "");
  for (int i = 0; i < 20; ++i) {
    int fd = Dial(server->port());
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    (void)!write(fd, get.data(), get.size());
    greedy.push_back(fd);
  }
  // The store queues what fits, then the rest wait; it still serves the others.
  for (int i = 0; i < 100 && server->stats().queued_bytes < 2 * kMaxStoreValueBytes; ++i) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(own->Set("small", "v", 2s).ok());
  EXPECT_EQ(own->Get("small", 2s).value(), "v");
  const TcpStoreStats stats = server->stats();
  EXPECT_GE(stats.peak_queued_bytes, 2 * kMaxStoreValueBytes) << "the test did not fill the budget";
  EXPECT_LE(stats.peak_queued_bytes, kMaxQueuedReplyBytes);
  for (int fd : greedy) close(fd);
}

TEST(StoreBudget, AWaiterWhoseReplyDoesNotFitIsDroppedAndCounted) {
  TcpStoreServerOptions so;
  so.reply_budget = 1 << 20;
  auto server = TcpStoreServer::Start("127.0.0.1", 0, so).value();
  std::vector<int> waiters;
  const std::string get = EncodeStoreRequest(kStoreGet, "late", "");
  for (int i = 0; i < 4; ++i) {
    int fd = Dial(server->port());
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    (void)!write(fd, get.data(), get.size());
    waiters.push_back(fd);
  }
  auto own = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
  std::this_thread::sleep_for(100ms);  // the gets have arrived
  ASSERT_TRUE(own->Set("late", std::string(600 << 10, 'x'), 5s).ok());
  EXPECT_GE(server->stats().budget_drops, 1u);
  EXPECT_LE(server->stats().peak_queued_bytes, so.reply_budget);
  for (int fd : waiters) close(fd);
}

TEST(StoreAuth, WithoutASecretEverythingRunsOpen) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0).value();
  auto store = TcpStore::Connect("127.0.0.1", server->port(), 2s).value();
  ASSERT_TRUE(store->Set("k", "v", 2s).ok());
  int raw = Dial(server->port());
  const std::string get = EncodeStoreRequest(kStoreGet, "k", "");
  (void)!write(raw, get.data(), get.size());
  EXPECT_EQ(ReadFor(raw, 300ms).first, EncodeStoreReply(kStoreOk, "v")) << "the open store did not answer";
  close(raw);
  ExpectTwoRanksReduce(server->port(), GroupOptions(""));
  // A client with a secret will not trust a store that cannot prove one.
  auto strict = TcpStore::Connect("127.0.0.1", server->port(), 500ms, kSecret);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), StatusCode::kUnauthenticated) << strict.status().ToString();
}

TEST(StoreAuth, ProofsAreBoundToTheirRoleAndNonces) {
  const std::string t = "transcript";
  const std::string p = MakeProof(kSecret, ProofRole::kStoreClient, t);
  EXPECT_EQ(p.size(), kProofBytes);
  EXPECT_TRUE(CheckProof(kSecret, ProofRole::kStoreClient, t, p));
  EXPECT_FALSE(CheckProof(kSecret, ProofRole::kStoreServer, t, p)) << "a client's proof reflected as the server's";
  EXPECT_FALSE(CheckProof(kSecret, ProofRole::kStoreClient, t + "x", p));
  EXPECT_FALSE(CheckProof("other", ProofRole::kStoreClient, t, p));
  EXPECT_FALSE(CheckProof(kSecret, ProofRole::kStoreClient, t, p.substr(1)));
  EXPECT_NE(NewNonce(), NewNonce());
}

}  // namespace
}  // namespace ringmaster::comm
