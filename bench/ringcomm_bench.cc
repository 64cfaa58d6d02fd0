// ringcomm-bench: nccl-tests-style collective benchmark. It launches N rank
// processes on this machine for ringcomm and, in the same invocation, for
// the anchors (Gloo's ring, ring-chunked and halving-doubling over TCP;
// OpenMPI's MPI_Allreduce on shared memory and on TCP), and prints one line
// per (implementation, algorithm, size): the median of >= 10 timed
// iterations after warm-up, algbw = bytes / time, busbw = algbw * 2(n-1)/n
// for all-reduce. --check verifies every result and exits 1 on a mismatch.
//
//   ringcomm-bench --op allreduce --ranks 2 --sizes 1M:64M --compare gloo,mpi --csv --check
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include "bench_util.h"
#include "comm/context.h"
#include "comm/environment.h"

extern char** environ;

namespace ringmaster::bench {
namespace {

using comm::Algorithm;
using comm::DataType;

struct Flags {
  std::string op = "allreduce";
  int ranks = 2;
  std::string sizes = "4K:256M";
  std::string transports = "auto";
  std::string dtype = "float32";
  std::string algorithms = "auto";
  std::string compare;
  bool check = false, csv = false;
  int iters = 10, warmup = 3, streams = 1;
  std::string chunk = "256K";
  double timeout_s = 120;
  // worker / store-server modes
  std::string worker;
  int rank = 0;
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  std::string address = "127.0.0.1";
  std::string gloo_dir;
  bool store_server = false;
  bool from_env = false;
};

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Algorithm ParseAlgorithm(const std::string& s) {
  if (s == "ring") return Algorithm::kRing;
  if (s == "rd" || s == "recursive-doubling") return Algorithm::kRecursiveDoubling;
  if (s == "ps" || s == "parameter-server") return Algorithm::kParameterServer;
  return Algorithm::kAuto;
}

// ---- ringcomm worker

// The ringcomm options the flags ask for (both worker modes use them).
comm::Options OptionsFrom(const Flags& f) {
  comm::Options o;
  o.transport = f.transports == "tcp" ? comm::TransportKind::kTcp
              : f.transports == "shm" ? comm::TransportKind::kShm : comm::TransportKind::kAuto;
  o.streams = f.streams;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  std::vector<size_t> chunk;
  ParseSizes(f.chunk, &chunk);
  if (!chunk.empty()) o.chunk_bytes = chunk[0];
  return o;
}

int RunRingcomm(const Flags& f, comm::Context& c, size_t small_bytes);

int RingcommWorker(const Flags& f) {
  auto store = comm::TcpStore::Connect(f.store_host, f.store_port, std::chrono::seconds(30));
  if (!store.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", f.rank, store.status().ToString().c_str());
    return 2;
  }
  comm::Options o = OptionsFrom(f);
  o.address = f.address;
  auto ctx = comm::Context::Create(store->get(), f.rank, f.ranks, o);
  if (!ctx.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", f.rank, ctx.status().ToString().c_str());
    return 2;
  }
  return RunRingcomm(f, **ctx, o.small_bytes);
}

// The measurement loop of a ringcomm worker, on a formed group.
int RunRingcomm(const Flags& f, comm::Context& c, size_t small_bytes) {
  DataType type = comm::ParseDataType(f.dtype).value_or(DataType::kFloat32);
  Algorithm algo = ParseAlgorithm(f.algorithms);
  std::vector<size_t> sizes;
  ParseSizes(f.sizes, &sizes);
  const size_t es = comm::ElementSize(type);
  int bad = 0;
  for (size_t bytes : sizes) {
    size_t count = bytes / es;
    std::vector<char> in(count * es), out(f.op == "allgather" ? count * es * c.size() : count * es);
    std::vector<float> ref(count);
    if (type == DataType::kFloat32) {
      for (size_t i = 0; i < count; ++i) reinterpret_cast<float*>(in.data())[i] = Input(c.rank(), i);
    }
    auto run = [&]() -> Status {
      if (f.op == "allgather") return c.AllGather(in.data(), out.data(), count / c.size(), type);
      if (f.op == "broadcast") return c.Broadcast(in.data(), count, type, 0);
      return c.AllReduce(in.data(), out.data(), count, type, comm::ReduceOp::kSum, algo);
    };
    std::vector<double> times;
    for (int it = 0; it < f.warmup + f.iters; ++it) {
      if (Status st = c.Barrier(); !st.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", c.rank(), st.ToString().c_str());
        return 2;
      }
      auto t0 = std::chrono::steady_clock::now();
      Status st = run();
      auto t1 = std::chrono::steady_clock::now();
      if (!st.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", c.rank(), st.ToString().c_str());
        return 2;
      }
      if (it >= f.warmup) times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    if (f.check && f.op == "allreduce" && type == DataType::kFloat32) {
      const float* got = reinterpret_cast<const float*>(out.data());
      for (size_t i = 0; i < count; ++i) {
        if (got[i] != Expected(c.size(), i)) {
          std::fprintf(stderr, "ringcomm: rank %d: %zu bytes: element %zu is %f, expected %f\n", c.rank(), bytes, i,
                       got[i], Expected(c.size(), i));
          bad = 1;
          break;
        }
      }
    }
    const char* name = f.algorithms == "auto"
                           ? (bytes < small_bytes ? "recursive-doubling" : "ring")
                           : comm::AlgorithmName(algo);
    std::string label = fmt::format("{}/{}", name, f.transports);
    if (c.rank() == 0) PrintResult("ringcomm", label.c_str(), c.size(), bytes, Median(times));
  }
  return bad;
}

// ---- Gloo worker: the anchor, over its TCP transport

int GlooWorker(const Flags& f) {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = f.address;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(f.gloo_dir);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(f.rank, f.ranks);
    ctx->setTimeout(std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000)));
    ctx->connectFullMesh(store, dev);
    std::vector<size_t> sizes;
    ParseSizes(f.sizes, &sizes);
    int bad = 0;
    for (size_t bytes : sizes) {
      size_t count = bytes / sizeof(float);
      std::vector<float> buf(count);
      std::vector<float*> ptrs = {buf.data()};
      std::unique_ptr<gloo::Algorithm> algo;
      if (f.algorithms == "ring") algo = std::make_unique<gloo::AllreduceRing<float>>(ctx, ptrs, static_cast<int>(count));
      else if (f.algorithms == "ring-chunked") algo = std::make_unique<gloo::AllreduceRingChunked<float>>(ctx, ptrs, static_cast<int>(count));
      else algo = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(ctx, ptrs, static_cast<int>(count));
      gloo::BarrierAllToOne barrier(ctx);
      std::vector<double> times;
      for (int it = 0; it < f.warmup + f.iters; ++it) {
        for (size_t i = 0; i < count; ++i) buf[i] = Input(f.rank, i);  // in place: refill, untimed
        barrier.run();
        auto t0 = std::chrono::steady_clock::now();
        algo->run();
        auto t1 = std::chrono::steady_clock::now();
        if (it >= f.warmup) times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      if (f.check) {
        for (size_t i = 0; i < count; ++i) {
          if (buf[i] != Expected(f.ranks, i)) {
            std::fprintf(stderr, "gloo %s: rank %d: %zu bytes: element %zu is %f, expected %f\n", f.algorithms.c_str(),
                         f.rank, bytes, i, buf[i], Expected(f.ranks, i));
            bad = 1;
            break;
          }
        }
      }
      if (f.rank == 0) PrintResult("gloo", f.algorithms.c_str(), f.ranks, bytes, Median(times));
    }
    return bad;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo rank %d: %s\n", f.rank, e.what());
    return 2;
  }
}

// ---- driver

struct Row {
  std::string impl, algorithm;
  int ranks;
  size_t bytes;
  double time_us;
};

std::string Self() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

// Runs argv (and its children) with stdout captured; returns the exit code.
int RunCaptured(const std::vector<std::string>& args, std::string* out) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return 127;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_addclose(&fa, pipefd[0]);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(rc));
    return 127;
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof buf)) > 0) out->append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Spawns `ranks` workers of this binary and collects rank 0's results.
int RunWorkers(const Flags& f, const std::vector<std::string>& extra, std::string* out) {
  std::vector<pid_t> pids;
  int pipefd[2];
  if (pipe(pipefd) != 0) return 127;
  for (int r = 0; r < f.ranks; ++r) {
    std::vector<std::string> args = {Self(), "--rank", std::to_string(r)};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (r == 0) posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
    else posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addclose(&fa, pipefd[0]);
    pid_t pid;
    if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) == 0) pids.push_back(pid);
    posix_spawn_file_actions_destroy(&fa);
  }
  close(pipefd[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof buf)) > 0) out->append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int worst = 0;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    worst = std::max(worst, code);
  }
  return worst;
}

void Collect(const std::string& out, std::vector<Row>* rows) {
  std::stringstream ss(out);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.rfind("RESULT ", 0) != 0) continue;
    std::stringstream ls(line.substr(7));
    Row r;
    ls >> r.impl >> r.algorithm >> r.ranks >> r.bytes >> r.time_us;
    rows->push_back(r);
  }
}

double BusFactor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "allgather") return static_cast<double>(n - 1) / n;
  return 1.0;
}

int Drive(const Flags& f) {
  std::vector<size_t> sizes;
  if (!ParseSizes(f.sizes, &sizes)) {
    std::cerr << "ringcomm-bench: --sizes: \"" << f.sizes << "\" is not a size or range like 4K:256M\n";
    return 2;
  }
  if (!comm::ParseDataType(f.dtype)) {
    std::cerr << "ringcomm-bench: --dtype: \"" << f.dtype << "\" is not a type (float32, float64, float16, bfloat16, int32, int64, uint8)\n";
    return 2;
  }
  if (f.op != "allreduce" && f.op != "allgather" && f.op != "broadcast") {
    std::cerr << "ringcomm-bench: --op: \"" << f.op << "\" is not one of allreduce, allgather, broadcast\n";
    return 2;
  }
  auto compare = SplitList(f.compare);
  for (const auto& c : compare) {
    if (c != "gloo" && c != "mpi") {
      std::cerr << "ringcomm-bench: --compare: \"" << c << "\" is not gloo or mpi\n";
      return 2;
    }
  }
  if (!compare.empty() && (f.op != "allreduce" || f.dtype != "float32")) {
    std::cerr << "ringcomm-bench: --compare needs --op allreduce --dtype float32\n";
    return 2;
  }
  std::vector<Row> rows;
  int failures = 0;
  auto note = [&](const std::string& what, int rc) {
    if (rc != 0) {
      std::cerr << "ringcomm-bench: " << what << " failed (exit " << rc << ")\n";
      ++failures;
    }
  };
  std::vector<std::string> common = {"--op", f.op, "--ranks", std::to_string(f.ranks), "--sizes", f.sizes,
                                     "--iters", std::to_string(f.iters), "--warmup", std::to_string(f.warmup),
                                     "--dtype", f.dtype, "--streams", std::to_string(f.streams), "--chunk", f.chunk,
                                     "--timeout", std::to_string(f.timeout_s)};
  if (f.check) common.push_back("--check");

  for (const auto& transport : SplitList(f.transports)) {
    for (const auto& algo : SplitList(f.algorithms)) {
      auto server = comm::TcpStoreServer::Start("127.0.0.1", 0);
      if (!server.ok()) {
        std::cerr << server.status().ToString() << "\n";
        return 2;
      }
      std::vector<std::string> args = common;
      args.insert(args.end(), {"--worker", "ringcomm", "--store-port", std::to_string((*server)->port()),
                               "--transport", transport, "--algorithms", algo});
      std::string out;
      note(fmt::format("ringcomm {} over {}", algo, transport), RunWorkers(f, args, &out));
      Collect(out, &rows);
    }
  }
  if (std::find(compare.begin(), compare.end(), "gloo") != compare.end()) {
    for (const char* algo : {"ring", "ring-chunked", "halving-doubling"}) {
      auto dir = std::filesystem::temp_directory_path() / fmt::format("ringcomm-bench-gloo.{}", getpid());
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
      std::vector<std::string> args = common;
      args.insert(args.end(), {"--worker", "gloo", "--gloo-dir", dir.string(), "--algorithms", algo});
      std::string out;
      note(fmt::format("gloo {}", algo), RunWorkers(f, args, &out));
      Collect(out, &rows);
      std::filesystem::remove_all(dir);
    }
  }
  if (std::find(compare.begin(), compare.end(), "mpi") != compare.end()) {
    std::string mpi_bin = (std::filesystem::path(Self()).parent_path() / "ringcomm-bench-mpi").string();
    struct Variant {
      const char* label;
      std::vector<std::string> mca;
    };
    for (const Variant& v : {Variant{"default-shm", {}},
                             Variant{"tcp", {"--mca", "pml", "ob1", "--mca", "btl", "tcp,self"}}}) {
      std::vector<std::string> args = {"mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                                       "-np", std::to_string(f.ranks)};
      args.insert(args.end(), v.mca.begin(), v.mca.end());
      args.insert(args.end(), {mpi_bin, v.label, f.sizes, std::to_string(f.iters), std::to_string(f.warmup),
                               f.check ? "1" : "0"});
      std::string out;
      note(fmt::format("mpi {}", v.label), RunCaptured(args, &out));
      Collect(out, &rows);
    }
  }

  // The table.
  const double bus = BusFactor(f.op, f.ranks);
  if (f.csv) std::cout << "impl,algorithm,ranks,bytes,time_us,algbw_GBps,busbw_GBps\n";
  else std::cout << fmt::format("{:<9} {:<28} {:>5} {:>11} {:>12} {:>11} {:>11}\n", "impl", "algorithm", "ranks",
                                "bytes", "time_us", "algbw_GBps", "busbw_GBps");
  std::map<size_t, std::map<std::string, double>> best;  // bytes -> group -> busbw
  for (const Row& r : rows) {
    double algbw = r.bytes / r.time_us / 1e3;  // bytes/us = MB/s; /1e3 = GB/s
    double busbw = algbw * bus;
    if (f.csv) {
      std::cout << fmt::format("{},{},{},{},{:.1f},{:.3f},{:.3f}\n", r.impl, r.algorithm, r.ranks, r.bytes, r.time_us,
                               algbw, busbw);
    } else {
      std::cout << fmt::format("{:<9} {:<28} {:>5} {:>11} {:>12.1f} {:>11.3f} {:>11.3f}\n", r.impl, r.algorithm,
                               r.ranks, r.bytes, r.time_us, algbw, busbw);
    }
    std::string group = r.impl;
    if (r.impl == "ringcomm") group += r.algorithm.substr(r.algorithm.find('/'));  // per transport
    if (r.impl == "mpi") group += "/" + r.algorithm;
    best[r.bytes][group] = std::max(best[r.bytes][group], busbw);
  }
  // Ratios: ringcomm's best per transport over each anchor's best, same size, same run.
  std::vector<std::string> ratio_lines;
  for (auto& [bytes, groups] : best) {
    for (auto& [g, v] : groups) {
      if (g.rfind("ringcomm", 0) != 0) continue;
      for (auto& [a, av] : groups) {
        if (a.rfind("ringcomm", 0) == 0 || av <= 0) continue;
        ratio_lines.push_back(fmt::format("{},{},{},{:.2f}", bytes, g, a, v / av));
      }
    }
  }
  if (!ratio_lines.empty()) {
    std::cout << (f.csv ? "\n# ratios of best busbw (ours / anchor)\nbytes,ours,anchor,ratio\n"
                        : "\nratios of best busbw (ours / anchor):\nbytes,ours,anchor,ratio\n");
    for (const auto& l : ratio_lines) std::cout << l << "\n";
  }
  if (failures > 0) {
    std::cerr << "ringcomm-bench: " << failures << " run(s) failed" << (f.check ? " or did not pass --check" : "") << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ringmaster::bench

int main(int argc, char** argv) {
  using namespace ringmaster::bench;
  Flags f;
  CLI::App app{"ringcomm-bench: collective benchmark of ringcomm against Gloo and MPI"};
  app.add_option("--op", f.op, "allreduce, allgather or broadcast")->capture_default_str();
  app.add_option("--ranks", f.ranks, "rank processes")->capture_default_str()->check(CLI::Range(1, 256));
  app.add_option("--sizes", f.sizes, "bytes per rank: one size or LOW:HIGH (x2 steps)")->capture_default_str();
  app.add_option("--transport", f.transports, "tcp, shm or auto; a comma list runs each")->capture_default_str();
  app.add_option("--dtype", f.dtype, "element type")->capture_default_str();
  app.add_option("--algorithms", f.algorithms, "ringcomm: auto, ring, rd, ps; a comma list runs each")->capture_default_str();
  app.add_option("--compare", f.compare, "anchors to run in the same invocation: gloo,mpi");
  app.add_flag("--check", f.check, "verify every result; exit 1 on a mismatch");
  app.add_flag("--csv", f.csv, "print CSV");
  app.add_option("--iters", f.iters, "timed iterations (the median is printed)")->capture_default_str()->check(CLI::Range(10, 100000));
  app.add_option("--warmup", f.warmup, "untimed iterations first")->capture_default_str();
  app.add_option("--streams", f.streams, "ringcomm TCP connections per peer")->capture_default_str();
  app.add_option("--chunk", f.chunk, "ringcomm pipeline chunk")->capture_default_str();
  app.add_option("--timeout", f.timeout_s, "seconds before an operation gives up")->capture_default_str();
  // Internal: how the driver (and bench/ring_vs_ps.sh) start workers.
  app.add_option("--worker", f.worker)->group("");
  app.add_option("--rank", f.rank)->group("");
  app.add_option("--store-host", f.store_host)->group("");
  app.add_option("--store-port", f.store_port)->group("");
  app.add_option("--address", f.address, "this rank's address for TCP (workers)")->group("");
  app.add_option("--gloo-dir", f.gloo_dir)->group("");
  app.add_flag("--store-server", f.store_server, "run a rendezvous store on --store-host:--store-port")->group("");
  app.add_flag("--from-env", f.from_env,
               "run as one rank of a Ringmaster distributed job: the group comes from the task's environment");
  CLI11_PARSE(app, argc, argv);

  if (f.store_server) {
    auto s = ringmaster::comm::TcpStoreServer::Start(f.store_host, f.store_port);
    if (!s.ok()) {
      std::cerr << s.status().ToString() << "\n";
      return 2;
    }
    std::cout << "store on " << f.store_host << ":" << (*s)->port() << std::endl;
    pause();
    return 0;
  }
  if (f.from_env) {
    ringmaster::comm::Options o = OptionsFrom(f);
    auto group = ringmaster::comm::JoinFromEnvironment(o);
    if (!group.ok()) {
      std::cerr << "ringcomm-bench: " << group.status().message() << "\n";
      return 2;
    }
    return RunRingcomm(f, *group->context, o.small_bytes);
  }
  if (f.worker == "ringcomm") return RingcommWorker(f);
  if (f.worker == "gloo") return GlooWorker(f);
  return Drive(f);
}
