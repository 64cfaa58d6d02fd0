// ringcomm against a simple reference: every op x dtype x count x world
// size x transport, with ranks as threads and as processes; plus failures:
// a SIGKILLed rank, a stalled rank, abort, mismatched counts.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "comm/context.h"
#include "comm/store.h"

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
    ASSERT_TRUE(s->Set("a/b", "value").ok());
    EXPECT_EQ(s->Get("a/b", 50ms).value(), "value");
    EXPECT_EQ(s->Add("n", 2).value(), 2);
    EXPECT_EQ(s->Add("n", 3).value(), 5);
    std::thread late([s] {
      std::this_thread::sleep_for(50ms);
      (void)s->Set("late", "here");
    });
    // Get waits for a key set later (a different connection for TCP: the store
    // is shared by the waiting Get, so use a second client).
    late.join();
    EXPECT_EQ(s->Get("late", 1s).value(), "here");
    PrefixStore scoped("gen/7/", s);
    ASSERT_TRUE(scoped.Set("k", "v").ok());
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

}  // namespace
}  // namespace ringmaster::comm
