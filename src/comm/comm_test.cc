// ringcomm against a simple reference: every op x dtype x count x world
// size x transport, with ranks as threads and as processes; plus failures:
// a SIGKILLed rank, a stalled rank, abort, mismatched counts; point to point
// matched by tag and progressing on its own; teardown within the deadline;
// strangers on a rank's listener and on the store.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/context.h"
#include "comm/store.h"
#include "comm/test_sockets.h"

namespace ringmaster::comm {
namespace {

using namespace std::chrono_literals;

const DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                           DataType::kInt32,   DataType::kInt64,   DataType::kUInt8};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

// ---- typed access through doubles; every test value is small and integral,
// so it is exact in every type, and sums, mins, maxes and products stay exact.

void Put(DataType t, void* p, size_t i, double v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(p)[i] = v; break;
    case DataType::kFloat16: static_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(p)[i] = FloatToBFloat16(static_cast<float>(v)); break;
    case DataType::kInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DataType::kUInt8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
  }
}

double Get(DataType t, const void* p, size_t i) {
  switch (t) {
    case DataType::kFloat32: return static_cast<const float*>(p)[i];
    case DataType::kFloat64: return static_cast<const double*>(p)[i];
    case DataType::kFloat16: return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16: return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kInt32: return static_cast<const int32_t*>(p)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DataType::kUInt8: return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

bool IsFloat(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

// The value rank r contributes at index i.
double Value(DataType t, ReduceOp op, int r, size_t i) {
  if (op == ReduceOp::kProduct) return 1 + static_cast<double>((i + r) % 2);  // product <= 2^8
  double v = static_cast<double>((i * 7 + static_cast<size_t>(r) * 3) % 5);
  return t == DataType::kUInt8 ? v : v - 2;  // [-2, 2], or [0, 4] unsigned
}

// What `op` over all ranks yields at i, in type t's arithmetic.
double Expected(DataType t, ReduceOp op, int world, size_t i) {
  double acc = Value(t, op, 0, i);
  for (int r = 1; r < world; ++r) {
    double v = Value(t, op, r, i);
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kProduct: acc *= v; break;
    }
  }
  if (t == DataType::kUInt8) acc = static_cast<double>(static_cast<int64_t>(acc) & 0xff);  // wraps like uint8
  if (op == ReduceOp::kAvg) {
    if (IsFloat(t)) acc /= world;
    else acc = static_cast<double>(static_cast<int64_t>(acc) / world);  // integer division truncates
  }
  return acc;
}

bool Close(DataType t, double got, double want) {
  double tol = t == DataType::kFloat16 || t == DataType::kBFloat16 ? 1e-2 : t == DataType::kFloat32 ? 1e-6 : 1e-12;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

struct Checker {
  std::vector<std::string>* failures;
  std::string what;
  // Records at most one mismatch per call, with where it was.
  void Expect(DataType t, const void* buf, size_t count, const std::function<double(size_t)>& want) {
    for (size_t i = 0; i < count; ++i) {
      double g = Get(t, buf, i), w = want(i);
      if (!Close(t, g, w)) {
        failures->push_back(fmt::format("{}: element {} is {}, expected {}", what, i, g, w));
        return;
      }
    }
  }
  void Ok(const Status& st) {
    if (!st.ok()) failures->push_back(fmt::format("{}: {}", what, st.ToString()));
  }
};

// The large count of the matrix: 1000003 (prime, so nothing divides evenly);
// sanitizer runs lower it through RINGCOMM_TEST_BIG_COUNT to stay quick.
size_t BigCount() {
  const char* env = getenv("RINGCOMM_TEST_BIG_COUNT");
  return env ? std::stoul(env) : 1000003;
}

// Every collective, every dtype, every count, on one context. Returns the failures.
std::vector<std::string> RunMatrix(Context& ctx) {
  std::vector<std::string> failures;
  const int n = ctx.size(), r = ctx.rank();
  const std::vector<size_t> counts = {0, 1, 7, static_cast<size_t>(n - 1), BigCount()};
  for (DataType t : kTypes) {
    const size_t es = ElementSize(t);
    for (size_t count : counts) {
      std::string where = fmt::format("rank {}/{} {} count {}", r, n, DataTypeName(t), count);
      std::vector<char> in(count * es + 1), out(count * es + 1);
      // AllReduce: every op; auto picks recursive doubling or ring by size.
      for (ReduceOp op : kOps) {
        for (size_t i = 0; i < count; ++i) Put(t, in.data(), i, Value(t, op, r, i));
        bool in_place = (static_cast<int>(op) + count) % 2 == 0;
        Checker c{&failures, fmt::format("allreduce {} {} ({})", ReduceOpName(op), where, in_place ? "in place" : "out of place")};
        void* dst = in_place ? in.data() : out.data();
        c.Ok(ctx.AllReduce(in.data(), dst, count, t, op));
        c.Expect(t, dst, count, [&](size_t i) { return Expected(t, op, n, i); });
      }
      // Each algorithm explicitly, and the async API.
      for (Algorithm a : {Algorithm::kRing, Algorithm::kRecursiveDoubling, Algorithm::kParameterServer}) {
        for (size_t i = 0; i < count; ++i) Put(t, in.data(), i, Value(t, ReduceOp::kSum, r, i));
        Checker c{&failures, fmt::format("allreduce sum {} {}", AlgorithmName(a), where)};
        c.Ok(ctx.AllReduceAsync(in.data(), out.data(), count, t, ReduceOp::kSum, a)->Wait());
        c.Expect(t, out.data(), count, [&](size_t i) { return Expected(t, ReduceOp::kSum, n, i); });
        // Out of place, the input is only read (the ring sends from it as it goes).
        c.Expect(t, in.data(), count, [&](size_t i) { return Value(t, ReduceOp::kSum, r, i); });
      }
      // ReduceScatter / AllGather: `block` elements per rank (the big count is split).
      const size_t block = count > 1000 ? count / n : count;
      {
        std::vector<char> full(block * n * es + 1), mine(block * es + 1);
        for (size_t i = 0; i < block * n; ++i) Put(t, full.data(), i, Value(t, ReduceOp::kMax, r, i));
        Checker c{&failures, fmt::format("reduce_scatter max {} block {}", where, block)};
        c.Ok(ctx.ReduceScatter(full.data(), mine.data(), block, t, ReduceOp::kMax));
        c.Expect(t, mine.data(), block, [&](size_t i) { return Expected(t, ReduceOp::kMax, n, r * block + i); });

        for (size_t i = 0; i < block; ++i) Put(t, mine.data(), i, Value(t, ReduceOp::kSum, r, i));
        Checker g{&failures, fmt::format("allgather {} block {}", where, block)};
        g.Ok(ctx.AllGather(mine.data(), full.data(), block, t));
        g.Expect(t, full.data(), block * n, [&](size_t i) { return Value(t, ReduceOp::kSum, static_cast<int>(i / std::max<size_t>(block, 1)), i % std::max<size_t>(block, 1)); });
      }
      // Broadcast from a root that moves with the count.
      {
        int root = static_cast<int>(count % n);
        for (size_t i = 0; i < count; ++i) Put(t, in.data(), i, r == root ? Value(t, ReduceOp::kSum, root, i) : 0);
        Checker c{&failures, fmt::format("broadcast root {} {}", root, where)};
        c.Ok(ctx.Broadcast(in.data(), count, t, root));
        c.Expect(t, in.data(), count, [&](size_t i) { return Value(t, ReduceOp::kSum, root, i); });
      }
      // Reduce to the last rank.
      {
        int root = n - 1;
        for (size_t i = 0; i < count; ++i) Put(t, in.data(), i, Value(t, ReduceOp::kSum, r, i));
        Checker c{&failures, fmt::format("reduce sum root {} {}", root, where)};
        c.Ok(ctx.Reduce(in.data(), out.data(), count, t, ReduceOp::kSum, root));
        if (r == root) c.Expect(t, out.data(), count, [&](size_t i) { return Expected(t, ReduceOp::kSum, n, i); });
      }
      // Point to point around the ring: send to the next rank, receive from the previous.
      {
        for (size_t i = 0; i < count; ++i) Put(t, in.data(), i, Value(t, ReduceOp::kSum, r, i));
        Checker c{&failures, fmt::format("send/recv {}", where)};
        int prev = (r + n - 1) % n, next = (r + 1) % n;
        if (n > 1) {
          auto s = ctx.SendAsync(in.data(), count, t, next);
          c.Ok(ctx.Recv(out.data(), count, t, prev));
          c.Ok(s->Wait());
          c.Expect(t, out.data(), count, [&](size_t i) { return Value(t, ReduceOp::kSum, prev, i); });
        }
      }
    }
  }
  Checker b{&failures, fmt::format("barrier rank {}", r)};
  b.Ok(ctx.Barrier());
  return failures;
}

Options TestOptions(TransportKind t) {
  Options o;
  o.transport = t;
  o.timeout = 60s;
  o.shm_ring_bytes = 1 << 20;
  o.chunk_bytes = 64 << 10;  // small chunks exercise the pipeline on every size
  return o;
}

const char* Name(TransportKind t) { return t == TransportKind::kTcp ? "tcp" : t == TransportKind::kShm ? "shm" : "auto"; }

// N ranks as threads, each with its own Context and store connection.
template <typename F>
std::vector<std::vector<std::string>> RunThreads(int world, const Options& o, F fn) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0).value();
  std::vector<std::vector<std::string>> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto store = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
      auto ctx = Context::Create(store.get(), r, world, o);
      if (!ctx.ok()) {
        results[r] = {ctx.status().ToString()};
        return;
      }
      results[r] = fn(**ctx);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

class MatrixTest : public ::testing::TestWithParam<std::tuple<int, TransportKind>> {};

TEST_P(MatrixTest, EveryCollectiveMatchesTheReference) {
  auto [world, transport] = GetParam();
  auto results = RunThreads(world, TestOptions(transport), [](Context& c) { return RunMatrix(c); });
  for (int r = 0; r < world; ++r) {
    for (const auto& f : results[r]) ADD_FAILURE() << f;
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, MatrixTest,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8),
                                            ::testing::Values(TransportKind::kTcp, TransportKind::kShm)),
                         [](const auto& info) {
                           return fmt::format("world{}_{}", std::get<0>(info.param), Name(std::get<1>(info.param)));
                         });

// N ranks as processes: fork, run the matrix, exit with the failure count.
class ProcessTest : public ::testing::TestWithParam<std::tuple<int, TransportKind>> {};

TEST_P(ProcessTest, EveryCollectiveMatchesTheReference) {
  auto [world, transport] = GetParam();
  auto server = TcpStoreServer::Start("127.0.0.1", 0).value();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      auto store = TcpStore::Connect("127.0.0.1", server->port(), 10s);
      if (!store.ok()) _exit(100);
      auto ctx = Context::Create(store->get(), r, world, TestOptions(transport));
      if (!ctx.ok()) {
        fprintf(stderr, "rank %d: %s\n", r, ctx.status().ToString().c_str());
        _exit(101);
      }
      auto failures = RunMatrix(**ctx);
      ctx->reset();  // a clean close: peers must not take this exit for a crash
      for (const auto& f : failures) fprintf(stderr, "%s\n", f.c_str());
      _exit(failures.empty() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (int r = 0; r < world; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r << " status " << status;
  }
}

INSTANTIATE_TEST_SUITE_P(Processes, ProcessTest,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8),
                                            ::testing::Values(TransportKind::kTcp, TransportKind::kShm)),
                         [](const auto& info) {
                           return fmt::format("world{}_{}", std::get<0>(info.param), Name(std::get<1>(info.param)));
                         });

// ---- failures

class FaultTest : public ::testing::TestWithParam<TransportKind> {};

// One rank is SIGKILLed in the middle of a large all-reduce: every other rank
// returns an error naming that rank, well within the deadline.
TEST_P(FaultTest, SigkilledRankIsNamedByEverySurvivor) {
  const int world = 4, victim = 2;
  auto server = TcpStoreServer::Start("127.0.0.1", 0).value();
  int ready[2], report[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(report), 0);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      close(ready[0]);
      close(report[0]);
      auto store = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
      Options o = TestOptions(GetParam());
      o.timeout = 20s;
      auto ctx = Context::Create(store.get(), r, world, o).value();
      std::vector<float> buf(16 << 20, 1.0f);  // 64 MiB
      char byte = 1;
      (void)!write(ready[1], &byte, 1);
      for (int i = 0; i < 1000; ++i) {
        Status st = ctx->AllReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
        if (!st.ok()) {
          std::string line = fmt::format("{}|{}\n", r, st.ToString());
          (void)!write(report[1], line.data(), line.size());
          _exit(0);
        }
      }
      _exit(3);  // never noticed the failure
    }
    pids.push_back(pid);
  }
  close(ready[1]);
  close(report[1]);
  char byte;
  for (int r = 0; r < world; ++r) ASSERT_EQ(read(ready[0], &byte, 1), 1);
  std::this_thread::sleep_for(300ms);  // well into an all-reduce
  kill(pids[victim], SIGKILL);
  auto start = std::chrono::steady_clock::now();
  std::string reports;
  char buf[4096];
  ssize_t got;
  while ((got = read(report[0], buf, sizeof buf)) > 0) reports.append(buf, static_cast<size_t>(got));
  auto elapsed = std::chrono::steady_clock::now() - start;
  for (int r = 0; r < world; ++r) {
    int status;
    waitpid(pids[r], &status, 0);
    if (r != victim) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r << " status " << status;
    }
  }
  int lines = 0;
  size_t pos = 0, nl;
  while ((nl = reports.find('\n', pos)) != std::string::npos) {
    std::string line = reports.substr(pos, nl - pos);
    pos = nl + 1;
    ++lines;
    EXPECT_NE(line.find("allreduce: rank 2 (host "), std::string::npos) << line;
    EXPECT_NE(line.find(") died"), std::string::npos) << line;
  }
  EXPECT_EQ(lines, world - 1) << reports;
  EXPECT_LT(elapsed, 20s) << "survivors only gave up at the deadline";
  close(ready[0]);
  close(report[0]);
}

INSTANTIATE_TEST_SUITE_P(Transports, FaultTest, ::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                         [](const auto& info) { return std::string(Name(info.param)); });

// Frames split at every byte boundary, interleaved across many lanes: each
// part must keep its own partial header (a shared one was a real bug, found
// by bench/ring_vs_ps.sh at 8 hosts).
TEST(Framing, HeadersSplitAcrossReadsOnManyLanes) {
  for (TransportKind t : {TransportKind::kTcp, TransportKind::kShm}) {
    Options o = TestOptions(t);
    o.max_io_bytes = 5;
    auto results = RunThreads(4, o, [](Context& c) -> std::vector<std::string> {
      std::vector<std::string> failures;
      for (Algorithm a : {Algorithm::kParameterServer, Algorithm::kRing, Algorithm::kRecursiveDoubling}) {
        // A barrier talks to some peers only, so the lanes' message numbers
        // differ: a mixed-up header then no longer looks right by chance.
        if (Status st = c.Barrier(); !st.ok()) failures.push_back(st.ToString());
        std::vector<int32_t> v(3001);
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i) + c.rank();
        Status st = c.AllReduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum, a);
        if (!st.ok()) failures.push_back(st.ToString());
        for (size_t i = 0; i < v.size() && st.ok(); ++i) {
          if (v[i] != static_cast<int32_t>(4 * i + 6)) {
            failures.push_back(fmt::format("{}: element {} is {}", AlgorithmName(a), i, v[i]));
            break;
          }
        }
      }
      return failures;
    });
    for (const auto& r : results) {
      for (const auto& f : r) ADD_FAILURE() << Name(t) << ": " << f;
    }
  }
}

TEST(Failures, AStalledRankMeansDeadlineExceededNamingAPeer) {
  Options o = TestOptions(TransportKind::kTcp);
  o.timeout = 500ms;
  auto results = RunThreads(3, o, [](Context& c) -> std::vector<std::string> {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(1500ms);  // never joins the collective in time
      return {};
    }
    std::vector<float> v(1024, 1.0f);
    Status st = c.AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    return {st.ToString()};
  });
  for (int r : {0, 2}) {
    ASSERT_EQ(results[r].size(), 1u);
    EXPECT_NE(results[r][0].find("DeadlineExceeded: allreduce: timed out after 0.5 s waiting for rank "), std::string::npos)
        << results[r][0];
  }
}

TEST(Failures, AbortEndsABlockedOperationAndEveryLaterOne) {
  auto results = RunThreads(2, TestOptions(TransportKind::kShm), [](Context& c) -> std::vector<std::string> {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(1000ms);
      return {};
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(100ms);
      c.Abort("the job is shrinking");
    });
    float x = 1;
    Status first = c.AllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
    aborter.join();
    Status second = c.Barrier();
    return {first.ToString(), second.ToString()};
  });
  EXPECT_EQ(results[0][0], "Aborted: allreduce: aborted: the job is shrinking");
  EXPECT_EQ(results[0][1], "Aborted: allreduce: aborted: the job is shrinking");
}

// The store is gone (its rank served it and left), so no failure note can be
// recorded: the cause still reaches every survivor, in band (a failure notice
// after the frame in flight) or through the shared-memory segment, and every survivor
// names the rank that failed, not the neighbour it heard it from.
TEST(Failures, EverySurvivorNamesTheFailedRankWithoutAStore) {
  for (TransportKind t : {TransportKind::kTcp, TransportKind::kShm}) {
    auto server = TcpStoreServer::Start("127.0.0.1", 0).value();
    const int world = 3;
    std::atomic<int> formed{0};
    std::vector<std::string> errors(world), names(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        auto store = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
        Options o = TestOptions(t);
        o.timeout = 10s;
        auto ctx = Context::Create(store.get(), r, world, o).value();
        names[r] = ctx->Describe(2);
        ++formed;
        while (formed.load() < world + 1) std::this_thread::sleep_for(1ms);  // the store is stopped now
        std::vector<float> v(1 << 20, 1.0f);
        if (r == 2) {  // told to stop while the others wait for it in the all-reduce
          std::this_thread::sleep_for(100ms);
          ctx->Abort("the node is draining");
        }
        errors[r] = ctx->AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum, Algorithm::kRing).ToString();
      });
    }
    while (formed.load() < world) std::this_thread::sleep_for(1ms);
    server->Stop();
    ++formed;
    for (auto& th : threads) th.join();
    for (int r : {0, 1}) {
      EXPECT_NE(errors[r].find(names[r] + " failed: aborted: the node is draining"), std::string::npos)
          << Name(t) << " rank " << r << ": " << errors[r];
    }
  }
}

TEST(Failures, MismatchedCountsAreReportedNotCorrupted) {
  auto results = RunThreads(2, TestOptions(TransportKind::kTcp), [](Context& c) -> std::vector<std::string> {
    std::vector<int32_t> v(c.rank() == 0 ? 100 : 200, 1);
    Status st = c.AllReduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum, Algorithm::kRecursiveDoubling);
    return {st.ToString()};
  });
  // Whichever rank notices first records the cause; both ranks report it.
  for (int r = 0; r < 2; ++r) {
    bool named = results[r][0].find("sent 800 bytes where this rank expected 400") != std::string::npos ||
                 results[r][0].find("sent 400 bytes where this rank expected 800") != std::string::npos;
    EXPECT_TRUE(named) << results[r][0];
    EXPECT_EQ(results[r][0], results[0][0]);
  }
}

TEST(Arguments, BadArgumentsAreRefusedWithoutBreakingTheContext) {
  auto results = RunThreads(2, TestOptions(TransportKind::kTcp), [](Context& c) -> std::vector<std::string> {
    std::vector<std::string> out;
    float x = 1;
    out.push_back(c.Broadcast(&x, 1, DataType::kFloat32, 5).ToString());
    out.push_back(c.Send(&x, 1, DataType::kFloat32, c.rank()).ToString());
    out.push_back(c.AllReduce(nullptr, &x, 1, DataType::kFloat32, ReduceOp::kSum).ToString());
    out.push_back(c.AllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum).ToString());  // still works
    out.push_back(std::to_string(x));
    return out;
  });
  EXPECT_EQ(results[0][0], "InvalidArgument: broadcast: root must be in [0, 2), got 5");
  EXPECT_EQ(results[0][1], "InvalidArgument: send: peer must not be this rank");
  EXPECT_EQ(results[0][2], "InvalidArgument: allreduce: input is null");
  EXPECT_EQ(results[0][3], "Ok");
  EXPECT_EQ(results[0][4], "2.000000");
}

TEST(Async, QueuedWorkRunsInOrderAndOverlapsTheCaller) {
  auto results = RunThreads(3, TestOptions(TransportKind::kAuto), [](Context& c) -> std::vector<std::string> {
    std::vector<std::string> out;
    std::vector<float> a(100000, 1.0f), b(100000, 2.0f), r(100000, 0.0f);
    auto w1 = c.AllReduceAsync(a.data(), a.data(), a.size(), DataType::kFloat32, ReduceOp::kSum);
    auto w2 = c.ReduceAsync(b.data(), r.data(), b.size(), DataType::kFloat32, ReduceOp::kMax, 0);
    auto w3 = c.BarrierAsync();
    auto w4 = c.ReduceScatterAsync(a.data(), b.data(), a.size() / 3, DataType::kFloat32, ReduceOp::kSum);
    for (auto& w : {w1, w2, w3, w4}) out.push_back(w->Wait().ToString());
    out.push_back(fmt::format("{} {} {}", a[0], c.rank() == 0 ? r[0] : 2.0f, b[0]));
    return out;
  });
  for (const auto& r : results) {
    EXPECT_EQ(r, (std::vector<std::string>{"Ok", "Ok", "Ok", "Ok", "3 2 9"}));
  }
}

TEST(Setup, GenerationsFormSeparateGroupsOnOneStore) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0).value();
  // Generation 0 with 2 ranks, then generation 1 with 3: a grown elastic job.
  for (auto [gen, world] : {std::pair{0, 2}, std::pair{1, 3}}) {
    std::vector<std::thread> threads;
    std::vector<int> sums(world);
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r, gen = gen, world = world] {
        auto store = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
        Options o = TestOptions(TransportKind::kAuto);
        o.generation = gen;
        auto ctx = Context::Create(store.get(), r, world, o).value();
        int v = 1;
        Status st = ctx->AllReduce(&v, &v, 1, DataType::kInt32, ReduceOp::kSum);
        EXPECT_TRUE(st.ok()) << "generation " << gen << " rank " << r << ": " << st.ToString();
        sums[r] = v;
      });
    }
    for (auto& t : threads) t.join();
    for (int s : sums) EXPECT_EQ(s, world);
  }
}

TEST(Setup, AMissingRankTimesOutNamingIt) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0).value();
  auto store = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
  Options o;
  o.timeout = 300ms;
  auto ctx = Context::Create(store.get(), 0, 2, o);
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.status().message(), "connect: rank 1 did not join generation 0 within 0.3 s");
}

TEST(Stores, FileAndTcpStoresShareTheContract) {
  auto dir = std::filesystem::temp_directory_path() / fmt::format("rm_filestore_{}", getpid());
  std::filesystem::remove_all(dir);
  FileStore file(dir.string());
  auto server = TcpStoreServer::Start("127.0.0.1", 0).value();
  auto tcp = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
  for (Store* s : {static_cast<Store*>(&file), static_cast<Store*>(tcp.get())}) {
    EXPECT_EQ(s->Get("missing", 50ms).status().code(), StatusCode::kDeadlineExceeded);
    ASSERT_TRUE(s->Set("a/b", "value", 1s).ok());
    EXPECT_EQ(s->Get("a/b", 50ms).value(), "value");
    EXPECT_EQ(s->Add("n", 2, 1s).value(), 2);
    EXPECT_EQ(s->Add("n", 3, 1s).value(), 5);
    std::thread late([s] {
      std::this_thread::sleep_for(50ms);
      (void)s->Set("late", "here", 1s);
    });
    // Get waits for a key set later (a different connection for TCP: the store
    // is shared by the waiting Get, so use a second client).
    late.join();
    EXPECT_EQ(s->Get("late", 1s).value(), "here");
    PrefixStore scoped("gen/7/", s);
    ASSERT_TRUE(scoped.Set("k", "v", 1s).ok());
    EXPECT_EQ(s->Get("gen/7/k", 50ms).value(), "v");
  }
  std::filesystem::remove_all(dir);
}

TEST(Reduce, KernelsCoverEveryTypeAndOp) {
  for (DataType t : kTypes) {
    for (ReduceOp op : kOps) {
      std::vector<char> a(64 * ElementSize(t)), b(64 * ElementSize(t));
      for (size_t i = 0; i < 64; ++i) {
        Put(t, a.data(), i, Value(t, op, 0, i));
        Put(t, b.data(), i, Value(t, op, 1, i));
      }
      ReduceInto(a.data(), b.data(), 64, t, op);
      if (op == ReduceOp::kAvg) DivideBy(a.data(), 64, t, 2);
      for (size_t i = 0; i < 64; ++i) {
        ASSERT_TRUE(Close(t, Get(t, a.data(), i), Expected(t, op, 2, i)))
            << DataTypeName(t) << " " << ReduceOpName(op) << " at " << i;
      }
    }
  }
}

// ---- point to point: matched by (peer, tag), on a channel of its own

Options P2pOptions(TransportKind t) {
  Options o = TestOptions(t);
  o.timeout = 10s;
  return o;
}

// What rank `src` sends with `tag`: distinct per (src, tag, salt, index).
std::vector<int32_t> Payload(int src, int tag, size_t n, int salt = 0) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i) + 1000000 * src + 10000 * tag + 100 * salt;
  return v;
}

// Below and above the eager limit: buffered at once, and offered then sent when the receive is posted.
const size_t kSmall = 10, kLarge = 300000;

class P2pTest : public ::testing::TestWithParam<TransportKind> {};

TEST_P(P2pTest, TaggedMessagesReceivedOutOfOrderGetTheirOwnPayloads) {
  auto results = RunThreads(3, P2pOptions(GetParam()), [](Context& c) -> std::vector<std::string> {
    std::vector<std::string> failures;
    const int next = (c.rank() + 1) % 3, prev = (c.rank() + 2) % 3;
    for (size_t n : {kSmall, kLarge}) {
      std::vector<std::vector<int32_t>> out;
      std::vector<std::shared_ptr<Work>> sends;
      for (int tag : {1, 2, 3}) out.push_back(Payload(c.rank(), tag, n));
      for (int tag : {1, 2, 3}) sends.push_back(c.SendAsync(out[tag - 1].data(), n, DataType::kInt32, next, tag));
      for (int tag : {3, 1, 2}) {
        std::vector<int32_t> got(n);
        if (Status st = c.Recv(got.data(), n, DataType::kInt32, prev, tag); !st.ok()) failures.push_back(st.ToString());
        if (got != Payload(prev, tag, n)) failures.push_back(fmt::format("n={} tag {}: got {} ...", n, tag, got[0]));
      }
      for (auto& s : sends) {
        if (Status st = s->Wait(); !st.ok()) failures.push_back(st.ToString());
      }
    }
    return failures;
  });
  for (const auto& r : results) {
    for (const auto& f : r) ADD_FAILURE() << f;
  }
}

TEST_P(P2pTest, MessagesOfOneTagNeverOvertakeEachOther) {
  auto results = RunThreads(2, P2pOptions(GetParam()), [](Context& c) -> std::vector<std::string> {
    std::vector<std::string> failures;
    const int peer = 1 - c.rank();
    for (size_t n : {kSmall, kLarge}) {
      std::vector<std::vector<int32_t>> out, in(5, std::vector<int32_t>(n));
      std::vector<std::shared_ptr<Work>> works;
      for (int i = 0; i < 5; ++i) out.push_back(Payload(c.rank(), 7, n, i));
      for (int i = 0; i < 5; ++i) works.push_back(c.SendAsync(out[i].data(), n, DataType::kInt32, peer, 7));
      std::vector<std::shared_ptr<Work>> recvs;
      for (int i = 0; i < 5; ++i) recvs.push_back(c.RecvAsync(in[i].data(), n, DataType::kInt32, peer, 7));
      for (int i = 4; i >= 0; --i) {  // waited on in reverse: the order they were posted in decides
        if (Status st = recvs[i]->Wait(); !st.ok()) failures.push_back(st.ToString());
        if (in[i] != Payload(peer, 7, n, i)) failures.push_back(fmt::format("n={} receive {} got message {}", n, i, (in[i][0] % 10000) / 100));
      }
      for (auto& w : works) {
        if (Status st = w->Wait(); !st.ok()) failures.push_back(st.ToString());
      }
    }
    return failures;
  });
  for (const auto& r : results) {
    for (const auto& f : r) ADD_FAILURE() << f;
  }
}

TEST_P(P2pTest, MessagesThatArriveBeforeTheirReceiveAreBuffered) {
  auto results = RunThreads(2, P2pOptions(GetParam()), [](Context& c) -> std::vector<std::string> {
    std::vector<std::string> failures;
    if (c.rank() == 0) {
      // Each send completes with no receive posted yet: the bytes wait at the receiver.
      for (int tag : {5, 6, 7}) {
        auto v = Payload(0, tag, kSmall);
        if (Status st = c.Send(v.data(), kSmall, DataType::kInt32, 1, tag); !st.ok()) failures.push_back(st.ToString());
      }
    }
    // After the barrier the messages have long arrived; rank 1 claims them newest first.
    if (Status st = c.Barrier(); !st.ok()) failures.push_back(st.ToString());
    if (c.rank() == 1) {
      for (int tag : {7, 6, 5}) {
        std::vector<int32_t> got(kSmall);
        if (Status st = c.Recv(got.data(), kSmall, DataType::kInt32, 0, tag); !st.ok()) failures.push_back(st.ToString());
        if (got != Payload(0, tag, kSmall)) failures.push_back(fmt::format("tag {}: got {}", tag, got[0]));
      }
    }
    return failures;
  });
  for (const auto& r : results) {
    for (const auto& f : r) ADD_FAILURE() << f;
  }
}

TEST_P(P2pTest, TaggedMessagesAndCollectivesInterleave) {
  auto results = RunThreads(3, P2pOptions(GetParam()), [](Context& c) -> std::vector<std::string> {
    std::vector<std::string> failures;
    auto ok = [&](const Status& st) {
      if (!st.ok()) failures.push_back(st.ToString());
    };
    const int next = (c.rank() + 1) % 3, prev = (c.rank() + 2) % 3;
    auto a = Payload(c.rank(), 1, kSmall), b = Payload(c.rank(), 2, kLarge);
    auto s1 = c.SendAsync(a.data(), kSmall, DataType::kInt32, next, 1);
    std::vector<float> v(100000, 1.0f);
    ok(c.AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum));
    auto s2 = c.SendAsync(b.data(), kLarge, DataType::kInt32, next, 2);
    auto bw = c.BroadcastAsync(v.data(), v.size(), DataType::kFloat32, 1);
    std::vector<int32_t> got2(kLarge), got1(kSmall);
    ok(c.Recv(got2.data(), kLarge, DataType::kInt32, prev, 2));
    ok(bw->Wait());
    ok(c.Recv(got1.data(), kSmall, DataType::kInt32, prev, 1));
    ok(s1->Wait());
    ok(s2->Wait());
    ok(c.Barrier());
    if (v[0] != 3.0f) failures.push_back(fmt::format("allreduce gave {}", v[0]));
    if (got1 != Payload(prev, 1, kSmall)) failures.push_back("tag 1 payload");
    if (got2 != Payload(prev, 2, kLarge)) failures.push_back("tag 2 payload");
    return failures;
  });
  for (const auto& r : results) {
    for (const auto& f : r) ADD_FAILURE() << f;
  }
}

// Both ranks post their receive before their send (torch's batch_isend_irecv
// does): a pending receive must not hold the send behind it.
TEST_P(P2pTest, ReceivesPostedFirstDoNotHoldSendsBack) {
  auto results = RunThreads(2, P2pOptions(GetParam()), [](Context& c) -> std::vector<std::string> {
    std::vector<std::string> failures;
    const int peer = 1 - c.rank();
    for (size_t n : {kSmall, kLarge, size_t{4} << 20}) {
      std::vector<int32_t> got(n);
      auto out = Payload(c.rank(), 0, n);
      auto r = c.RecvAsync(got.data(), n, DataType::kInt32, peer);
      auto s = c.SendAsync(out.data(), n, DataType::kInt32, peer);
      if (Status st = r->Wait(); !st.ok()) failures.push_back(st.ToString());
      if (Status st = s->Wait(); !st.ok()) failures.push_back(st.ToString());
      if (got != Payload(peer, 0, n)) failures.push_back(fmt::format("n={}: wrong payload", n));
    }
    return failures;
  });
  for (const auto& r : results) {
    for (const auto& f : r) ADD_FAILURE() << f;
  }
}

// A send moves while its rank does something else entirely: nobody waits on it.
TEST_P(P2pTest, SendsProgressWithoutAnyoneWaitingOnThem) {
  std::atomic<int64_t> recv_done_ms{0}, sender_back_ms{0};
  auto t0 = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count(); };
  auto results = RunThreads(2, P2pOptions(GetParam()), [&](Context& c) -> std::vector<std::string> {
    const size_t n = 2 << 20;  // 8 MiB: more than any socket buffer or ring holds
    if (c.rank() == 0) {
      auto out = Payload(0, 4, n);
      auto s = c.SendAsync(out.data(), n, DataType::kInt32, 1, 4);
      std::this_thread::sleep_for(1500ms);  // computing; not a ringcomm call in sight
      sender_back_ms = since();
      return {s->Wait().ToString()};
    }
    std::vector<int32_t> got(n);
    Status st = c.Recv(got.data(), n, DataType::kInt32, 0, 4);
    recv_done_ms = since();
    return {st.ToString(), got == Payload(0, 4, n) ? "ok" : "wrong payload"};
  });
  EXPECT_EQ(results[0], std::vector<std::string>{"Ok"});
  EXPECT_EQ(results[1], (std::vector<std::string>{"Ok", "ok"}));
  EXPECT_LT(recv_done_ms.load(), sender_back_ms.load()) << "the receive waited for the sender to wait";
}

// A rank whose worker is stuck in a collective (its peer has not joined it
// yet) still sends and receives: point to point never queues behind collectives.
TEST_P(P2pTest, PointToPointDoesNotWaitBehindACollective) {
  auto results = RunThreads(2, P2pOptions(GetParam()), [](Context& c) -> std::vector<std::string> {
    std::vector<std::string> out;
    std::vector<float> v(1000, 1.0f);
    int32_t x = c.rank() + 10, y = 0;
    std::shared_ptr<Work> ar;
    if (c.rank() == 0) ar = c.AllReduceAsync(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    out.push_back(c.SendAsync(&x, 1, DataType::kInt32, 1 - c.rank(), 8)->Wait().ToString());
    out.push_back(c.Recv(&y, 1, DataType::kInt32, 1 - c.rank(), 8).ToString());
    if (c.rank() == 1) out.push_back(c.AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum).ToString());
    else out.push_back(ar->Wait().ToString());
    out.push_back(fmt::format("{} {}", y, v[0]));
    return out;
  });
  EXPECT_EQ(results[0], (std::vector<std::string>{"Ok", "Ok", "Ok", "11 2"}));
  EXPECT_EQ(results[1], (std::vector<std::string>{"Ok", "Ok", "Ok", "10 2"}));
}

TEST_P(P2pTest, MismatchedSizesAreReportedNamingThePeer) {
  auto results = RunThreads(2, P2pOptions(GetParam()), [](Context& c) -> std::vector<std::string> {
    std::vector<int32_t> v(100, 1);
    if (c.rank() == 0) return {c.SendAsync(v.data(), 100, DataType::kInt32, 1, 3)->Wait().ToString()};
    return {c.Recv(v.data(), 50, DataType::kInt32, 0, 3).ToString(), c.Describe(0)};
  });
  EXPECT_NE(results[1][0].find(fmt::format("InvalidArgument: recv: {} sent 400 bytes with tag 3 where this rank expected 200",
                                           results[1][1])),
            std::string::npos)
      << results[1][0];
}

TEST_P(P2pTest, UnclaimedMessagesBeyondTheBoundFailNamingThePeer) {
  Options o = P2pOptions(GetParam());
  o.p2p_eager_bytes = 1024;
  o.p2p_unexpected_bytes = 8192;
  auto results = RunThreads(2, o, [](Context& c) -> std::vector<std::string> {
    std::vector<int32_t> v(256, 1);  // 1 KiB: eager
    if (c.rank() == 0) {
      std::vector<std::shared_ptr<Work>> sends;
      for (int i = 0; i < 20; ++i) sends.push_back(c.SendAsync(v.data(), 256, DataType::kInt32, 1, 1));
      for (auto& s : sends) (void)s->Wait();  // they fail once rank 1 gives up; `v` must outlive them
      return {};
    }
    std::this_thread::sleep_for(100ms);
    return {c.Recv(v.data(), 256, DataType::kInt32, 0, 2).ToString(), c.Describe(0)};
  });
  EXPECT_NE(results[1][0].find(fmt::format("ResourceExhausted: recv: {} sent more than 8192 bytes of point-to-point "
                                           "messages that no receive has claimed",
                                           results[1][1])),
            std::string::npos)
      << results[1][0];
}

INSTANTIATE_TEST_SUITE_P(Transports, P2pTest, ::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                         [](const auto& info) { return std::string(Name(info.param)); });

TEST(P2pFailures, AReceiveNobodyAnswersTimesOutNamingThePeer) {
  Options o = P2pOptions(TransportKind::kTcp);
  o.timeout = 300ms;
  auto results = RunThreads(2, o, [](Context& c) -> std::vector<std::string> {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(800ms);
      return {};
    }
    int32_t x;
    auto start = std::chrono::steady_clock::now();
    Status st = c.Recv(&x, 1, DataType::kInt32, 1, 9);
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    return {st.ToString(), c.Describe(1), std::to_string(took)};
  });
  EXPECT_EQ(results[0][0], fmt::format("DeadlineExceeded: recv: timed out after 0.3 s waiting for {} (tag 9)", results[0][1]));
  EXPECT_LT(std::stoi(results[0][2]), 1500);
}

TEST(P2pFailures, AReceiveFromAPeerThatLeftSaysSoAtOnce) {
  for (TransportKind t : {TransportKind::kTcp, TransportKind::kShm}) {
    auto server = TcpStoreServer::Start("127.0.0.1", 0).value();
    std::vector<std::string> got;
    std::string leaver;
    std::thread a([&] {
      auto store = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
      auto ctx = Context::Create(store.get(), 0, 2, P2pOptions(t)).value();
      leaver = ctx->Describe(1);
      int32_t x;
      auto start = std::chrono::steady_clock::now();
      Status st = ctx->Recv(&x, 1, DataType::kInt32, 1, 4);
      got = {st.ToString(), std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now() - start).count())};
    });
    std::thread b([&] {
      auto store = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
      auto ctx = Context::Create(store.get(), 1, 2, P2pOptions(t)).value();
      std::this_thread::sleep_for(200ms);
    });  // destroyed: a goodbye
    a.join();
    b.join();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], fmt::format("Unavailable: recv: {} left the group while this rank still needed it", leaver)) << Name(t);
    EXPECT_LT(std::stoi(got[1]), 5000) << Name(t);
  }
}

// ---- teardown: bounded by the deadline whatever is in flight

TEST(Teardown, DestroyingAContextWithWorkInFlightEndsByTheDeadline) {
  Options o = P2pOptions(TransportKind::kTcp);
  o.timeout = 500ms;
  int64_t destroy_ms = -1;
  std::vector<std::string> statuses;
  auto server = TcpStoreServer::Start("127.0.0.1", 0).value();
  std::thread idle([&] {
    auto store = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
    auto ctx = Context::Create(store.get(), 1, 2, o).value();
    std::this_thread::sleep_for(1500ms);  // never joins what rank 0 starts
  });
  {
    auto store = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
    auto ctx = Context::Create(store.get(), 0, 2, o).value();
    int32_t x = 0;
    std::vector<float> v(1000, 1.0f);
    auto recv = ctx->RecvAsync(&x, 1, DataType::kInt32, 1, 5);
    auto ar = ctx->AllReduceAsync(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    auto start = std::chrono::steady_clock::now();
    ctx.reset();
    destroy_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(recv->Done() && ar->Done());
    statuses = {recv->Wait().ToString(), ar->Wait().ToString()};
  }
  idle.join();
  EXPECT_LT(destroy_ms, 500 + 1000) << "destruction outlived the deadline";
  for (const auto& s : statuses) EXPECT_NE(s, "Ok") << s;
}

// ---- hostile input: other users' processes can reach a rank's listener and the store

std::string Request(uint8_t op, const std::string& key, const std::string& value) {
  std::string f(13 + key.size() + value.size(), '\0');
  f[0] = static_cast<char>(op);
  uint32_t kl = static_cast<uint32_t>(key.size());
  uint64_t vl = value.size();
  std::memcpy(&f[1], &kl, 4);
  std::memcpy(&f[5], key.data(), key.size());
  std::memcpy(&f[5 + key.size()], &vl, 8);
  std::memcpy(&f[13 + key.size()], value.data(), value.size());
  return f;
}

TEST(Hostile, StrangersOnTheListenerDoNotStopAGroupForming) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0).value();
  Options o = P2pOptions(TransportKind::kTcp);
  std::vector<std::string> out(2);
  std::thread rank0([&] {
    auto store = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
    auto ctx = Context::Create(store.get(), 0, 2, o);
    if (!ctx.ok()) {
      out[0] = ctx.status().ToString();
      return;
    }
    float x = 1;
    out[0] = (*ctx)->AllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum).ToString();
  });
  // Rank 0's port, from the store, as anyone on the host could read it.
  auto spy = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
  auto record = nlohmann::json::parse(spy->Get("gen/0/rank/0", 10s).value());
  const int port = record["port"];
  std::vector<int> strangers;
  strangers.push_back(Dial(port));  // silent
  int garbage = Dial(port);
  (void)!write(garbage, "GET / HTTP/1.0\r\n\r\n", 18);
  strangers.push_back(garbage);
  int stale = Dial(port);
  int32_t hello[4] = {0x48434d52, 1, 0, 99};  // right magic, wrong generation
  (void)!write(stale, hello, sizeof hello);
  strangers.push_back(stale);
  int half = Dial(port);
  (void)!write(half, hello, 6);  // a hello that never finishes
  strangers.push_back(half);
  auto start = std::chrono::steady_clock::now();
  std::thread rank1([&] {
    auto store = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
    auto ctx = Context::Create(store.get(), 1, 2, o);
    if (!ctx.ok()) {
      out[1] = ctx.status().ToString();
      return;
    }
    float x = 1;
    out[1] = (*ctx)->AllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum).ToString();
  });
  rank0.join();
  rank1.join();
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(out, (std::vector<std::string>{"Ok", "Ok"}));
  EXPECT_LT(took, 4s) << "setup waited for a stranger's hello";
  for (int fd : strangers) {
    EXPECT_TRUE(ReadFor(fd, 100ms).second) << "a stranger's connection was kept";
    close(fd);
  }
}

TEST(Hostile, TheStoreServerSurvivesMalformedRequestsAndSilentClients) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0).value();
  auto store = TcpStore::Connect("127.0.0.1", server->port(), 10s).value();
  ASSERT_TRUE(store->Set("big", std::string(1 << 20, 'x'), 5s).ok());
  ASSERT_TRUE(store->Set("word", "abc", 5s).ok());
  auto dropped = [&](const std::string& bytes) {
    int fd = Dial(server->port());
    (void)!write(fd, bytes.data(), bytes.size());
    bool closed = ReadFor(fd, 2s).second;
    close(fd);
    return closed;
  };
  EXPECT_TRUE(dropped(std::string("\x7f", 1))) << "an unknown request";
  EXPECT_TRUE(dropped(std::string("\x01\xff\xff\xff\xff", 5))) << "a 4 GiB key";
  std::string huge_value = Request(1, "k", "");
  uint64_t vl = uint64_t{1} << 40;
  std::memcpy(&huge_value[6], &vl, 8);
  EXPECT_TRUE(dropped(huge_value)) << "a 1 TiB value";
  // add on a word: an error reply, and the connection serves on.
  int fd = Dial(server->port());
  std::string two = Request(3, "word", "1") + Request(2, "word", "");
  (void)!write(fd, two.data(), two.size());
  auto [replies, closed] = ReadFor(fd, 500ms);
  EXPECT_FALSE(closed);
  ASSERT_GE(replies.size(), 9u);
  EXPECT_EQ(replies[0], 1) << "add on a word was not an error";
  EXPECT_NE(replies.find("abc"), std::string::npos) << "the connection stopped serving";
  close(fd);
  // Silent, half-sent and never-reading clients do not hold the others up.
  int silent = Dial(server->port());
  int half = Dial(server->port());
  (void)!write(half, "\x02\x03\x00", 3);
  int greedy = Dial(server->port());
  std::string gets;
  for (int i = 0; i < 100; ++i) gets += Request(2, "big", "");  // 100 MiB of replies it never reads
  (void)!write(greedy, gets.data(), gets.size());
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(store->Set("k" + std::to_string(i), "v", 2s).ok());
    ASSERT_EQ(store->Get("k" + std::to_string(i), 2s).value(), "v");
  }
  EXPECT_EQ(store->Add("n", 5, 2s).value(), 5);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_TRUE(ReadFor(greedy, 3s).second) << "a client that never reads was kept";
  for (int c : {silent, half, greedy}) close(c);
}

TEST(Hostile, AStoreClientRefusesAnImpossibleReply) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  socklen_t len = sizeof addr;
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread liar([&] {
    int c = accept(listener, nullptr, nullptr);
    (void)ReadFor(c, 200ms);
    char reply[9] = {0};
    uint64_t n = uint64_t{1} << 50;  // a petabyte, allegedly
    std::memcpy(reply + 1, &n, 8);
    (void)!write(c, reply, sizeof reply);
    (void)ReadFor(c, 500ms);
    close(c);
  });
  auto store = TcpStore::Connect("127.0.0.1", ntohs(addr.sin_port), 5s).value();
  auto v = store->Get("x", 2s);
  liar.join();
  close(listener);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("malformed reply"), std::string::npos) << v.status().ToString();
}

}  // namespace
}  // namespace ringmaster::comm
