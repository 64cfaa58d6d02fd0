// metrics-ingest: what the server's side of the metrics pipeline (src/monitor)
// costs for a fleet's samples, against its target (a 1,000-node x
// 50-series feed at 1 s ingested in <= 1 core), with the anchor measured in
// the same run. bench/metrics_ingest runs both modes; each runs alone too.
//
//   core (the default): N synthetic nodes, each sending every 2 simulated
//     seconds a heartbeat body of its 2 samples (protocol::ToJson, as the agent
//     does), for S simulated seconds. A sample holds 50 series: the node's 7,
//     2 GPUs x 4, and 7 tasks x 5 (cpu_cores, memory_bytes, pids, oom_kills,
//     gpu_util). Timed in CPU time (CLOCK_PROCESS_CPUTIME_ID; one thread) and
//     wall time, per stage, over each round of N heartbeats:
//       parse:  nlohmann::json::parse of the body's text + protocol::ParseSamples
//               (what the heartbeat route does);
//       ours:   Monitor::IngestNode with the node's task set (the SeriesStore);
//       anchor: every value INSERTed as a row (node, series, t_ms, value) into
//               SQLite (WAL, synchronous=NORMAL, one prepared statement, one
//               transaction per heartbeat): "one row per point in the metadata
//               database", the design the embedded store replaced; run
//               twice: the table alone (no index: no query can use it, the
//               anchor's best case) and indexed on (node, series, t_ms), what
//               a query by node and series needs.
//     Building the bodies is not timed. Cores needed at 1 s = CPU seconds per
//     simulated second. Then the store's memory: after the run, and at steady
//     state (50 series fed 25 h of 1 s points in a store of their own).
//   http: a client of a real `ringmaster server`: registers M nodes (one agent
//     token each), places 7 sleeping tasks on each (jobs with a node_selector;
//     no agent runs them, they stay SCHEDULED, i.e. placed, so the server keeps
//     their samples), then heartbeats once per node per 2 s from C keep-alive
//     connections, every sample each node took since its last heartbeat (its
//     own 1 s clock, as an agent), first with no samples (the heartbeat's
//     control-plane cost), then with them; the server's CPU from
//     /proc/PID/stat (utime + stime) over each phase.
#include <httplib.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "monitor/monitor.h"
#include "protocol/samples.h"

namespace {

using namespace ringmaster;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "metrics-ingest: %s\n", why.c_str());
  std::exit(1);
}

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}
double WallSeconds() { return std::chrono::duration<double>(SteadyClock::now().time_since_epoch()).count(); }
int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// CPU time and wall time of one stage, summed over the rounds.
struct Stage {
  double cpu = 0, wall = 0;
  double c0 = 0, w0 = 0;
  void Start() {
    c0 = CpuSeconds();
    w0 = WallSeconds();
  }
  void Stop() {
    cpu += CpuSeconds() - c0;
    wall += WallSeconds() - w0;
  }
};

// One node's synthetic readings: values that move each second like a busy
// GPU node's, with the digits real readings have (doubles print in full).
class Feed {
 public:
  Feed(int gpus, int tasks, uint64_t seed) : gpus_(gpus), tasks_(tasks), rng_(seed) {}

  protocol::NodeSample Sample(int64_t node, int64_t t_ms, const std::vector<int64_t>& task_ids) {
    protocol::NodeSample s;
    s.t_ms = t_ms;
    s.cpu = U(0.05, 0.95);
    s.memory_used_bytes = static_cast<int64_t>(U(64, 480) * (1 << 30));
    s.disk_used_bytes = static_cast<int64_t>(U(1, 2) * 1e12) + node;
    s.disk_read_bps = U(0, 5e8);
    s.disk_write_bps = U(0, 5e8);
    s.net_rx_bps = U(0, 1.2e9);
    s.net_tx_bps = U(0, 1.2e9);
    for (int g = 0; g < gpus_; ++g) {
      // As NVML reports them: utilisation in whole percent, power in mW, temperature in whole degrees.
      s.gpus.push_back({g, static_cast<int>(U(0, 100)) / 100.0, static_cast<int64_t>(U(1, 80)) << 30,
                        static_cast<int>(U(100'000, 700'000)) / 1000.0, static_cast<double>(static_cast<int>(U(30, 85)))});
    }
    for (int k = 0; k < tasks_; ++k) {
      protocol::TaskSample t;
      t.task_id = task_ids[static_cast<size_t>(k)];
      t.cpu_cores = U(0, 8);
      t.memory_bytes = static_cast<int64_t>(U(0.5, 60) * (1 << 30));
      t.pids = static_cast<int64_t>(U(1, 200));
      t.oom_kills = 0;
      t.gpu_util = U(0, 1);
      s.tasks.push_back(t);
    }
    return s;
  }
  // The series one sample makes.
  int SeriesPerNode() const { return 7 + 4 * gpus_ + 5 * tasks_; }

 private:
  double U(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }
  int gpus_, tasks_;
  std::mt19937_64 rng_;
};

std::string Body(const std::vector<protocol::NodeSample>& samples) { return json{{"samples", protocol::ToJson(samples)}}.dump(); }

// ---- the anchor: one row per point in SQLite

class SqliteAnchor {
 public:
  SqliteAnchor(const std::string& path, bool index) : path_(path) {
    std::remove(path.c_str());
    std::remove((path + "-wal").c_str());
    std::remove((path + "-shm").c_str());
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) Die("sqlite3_open " + path);
    Exec("PRAGMA journal_mode=WAL");
    Exec("PRAGMA synchronous=NORMAL");
    Exec("CREATE TABLE points (node INTEGER NOT NULL, series TEXT NOT NULL, t_ms INTEGER NOT NULL, value REAL NOT NULL)");
    if (index) Exec("CREATE INDEX points_by_series ON points (node, series, t_ms)");
    if (sqlite3_prepare_v2(db_, "INSERT INTO points (node, series, t_ms, value) VALUES (?, ?, ?, ?)", -1, &insert_,
                           nullptr) != SQLITE_OK) {
      Die(std::string("prepare: ") + sqlite3_errmsg(db_));
    }
  }
  ~SqliteAnchor() {
    sqlite3_finalize(insert_);
    sqlite3_close(db_);
  }

  // One heartbeat's samples, in one transaction.
  void Heartbeat(int64_t node, const std::vector<protocol::NodeSample>& samples) {
    Exec("BEGIN");
    char key[64];
    auto row = [&](const char* series, int64_t t, double v) {
      sqlite3_bind_int64(insert_, 1, node);
      sqlite3_bind_text(insert_, 2, series, -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(insert_, 3, t);
      sqlite3_bind_double(insert_, 4, v);
      if (sqlite3_step(insert_) != SQLITE_DONE) Die(std::string("insert: ") + sqlite3_errmsg(db_));
      sqlite3_reset(insert_);
    };
    for (const protocol::NodeSample& s : samples) {
      const int64_t t = s.t_ms;
      row("cpu", t, s.cpu);
      row("memory_bytes", t, static_cast<double>(s.memory_used_bytes));
      row("disk_used_bytes", t, static_cast<double>(s.disk_used_bytes));
      row("disk_read_bps", t, s.disk_read_bps);
      row("disk_write_bps", t, s.disk_write_bps);
      row("net_rx_bps", t, s.net_rx_bps);
      row("net_tx_bps", t, s.net_tx_bps);
      for (const protocol::GpuSample& g : s.gpus) {
        static const char* kNames[] = {"util", "memory_bytes", "power_w", "temperature_c"};
        const double v[] = {g.util, static_cast<double>(g.memory_used_bytes), g.power_w, g.temperature_c};
        for (int i = 0; i < 4; ++i) {
          std::snprintf(key, sizeof key, "gpu/%d/%s", g.index, kNames[i]);
          row(key, t, v[i]);
        }
      }
      for (const protocol::TaskSample& x : s.tasks) {
        static const char* kNames[] = {"cpu_cores", "memory_bytes", "pids", "oom_kills", "gpu_util"};
        const double v[] = {x.cpu_cores, static_cast<double>(x.memory_bytes), static_cast<double>(x.pids),
                            static_cast<double>(x.oom_kills), x.gpu_util};
        for (int i = 0; i < (x.gpu_util >= 0 ? 5 : 4); ++i) {
          std::snprintf(key, sizeof key, "task/%lld/%s", static_cast<long long>(x.task_id), kNames[i]);
          row(key, t, v[i]);
        }
      }
    }
    Exec("COMMIT");
  }

  // The database's bytes on disk (file and log), after a checkpoint.
  int64_t DiskBytes() {
    sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
    int64_t b = 0;
    for (const std::string& p : {path_, path_ + "-wal"}) {
      std::ifstream f(p, std::ios::binary | std::ios::ate);
      if (f) b += static_cast<int64_t>(f.tellg());
    }
    return b;
  }

 private:
  void Exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string e = err ? err : "?";
      sqlite3_free(err);
      Die(std::string(sql) + ": " + e);
    }
  }
  std::string path_;
  sqlite3* db_ = nullptr;
  sqlite3_stmt* insert_ = nullptr;
};

// ---- core

struct CoreOptions {
  int nodes = 1000, seconds = 120, gpus = 2, tasks = 7;
  std::string anchor = "both";  // plain, indexed, both, none
  std::string db_dir = "/tmp";
};

// A series' bytes at steady state, measured: `series` series fed `hours` of
// 1 s points in a store of their own; MemoryBytes at each whole hour.
std::vector<size_t> SteadyState(int series, int hours) {
  monitor::SeriesStore store;
  std::vector<std::string> keys;
  for (int i = 0; i < series; ++i) keys.push_back(fmt::format("node/{}/series{}", 1000 + i, i));
  std::vector<size_t> at_hour = {store.MemoryBytes()};
  const int64_t t0 = int64_t{1'800'000'000} * 1000;
  for (int64_t s = 0; s < int64_t{3600} * hours; ++s) {
    for (const std::string& k : keys) store.Add(k, t0 + s * 1000, static_cast<double>(s % 97));
    if ((s + 1) % 3600 == 0) at_hour.push_back(store.MemoryBytes());
  }
  return at_hour;
}

int RunCore(const CoreOptions& o) {
  if (o.nodes < 1 || o.seconds < 2 || o.gpus < 0 || o.tasks < 0) Die("bad sizes");
  if (o.anchor != "both" && o.anchor != "plain" && o.anchor != "indexed" && o.anchor != "none") Die("--anchor: both, plain, indexed or none");
  Feed feed(o.gpus, o.tasks, 42);
  const int per_node = feed.SeriesPerNode();
  std::printf("metrics_ingest core: %d nodes x %d series (7 node, %d GPUs x 4, %d tasks x 5), a heartbeat of 2 samples "
              "per node every 2 s, %d simulated s; one thread; %u cores here\n",
              o.nodes, per_node, o.gpus, o.tasks, o.seconds, std::thread::hardware_concurrency());
  monitor::Monitor mon;
  std::vector<std::vector<int64_t>> task_ids(static_cast<size_t>(o.nodes));
  std::vector<std::set<int64_t>> tasks_here(static_cast<size_t>(o.nodes));
  for (int n = 0; n < o.nodes; ++n) {
    for (int k = 0; k < o.tasks; ++k) task_ids[static_cast<size_t>(n)].push_back(int64_t{n + 1} * 16 + k);
    tasks_here[static_cast<size_t>(n)] = {task_ids[static_cast<size_t>(n)].begin(), task_ids[static_cast<size_t>(n)].end()};
  }
  // The anchors: the table alone, and with the index a query by node and series needs.
  struct Anchor {
    std::string name;  // "anchor" or "anchor, indexed"
    std::string key;   // its RESULT name
    std::string db;
    std::unique_ptr<SqliteAnchor> store;
    Stage stage;
  };
  std::vector<Anchor> anchors;
  for (bool indexed : {false, true}) {
    if (o.anchor == "none" || (o.anchor == "plain" && indexed) || (o.anchor == "indexed" && !indexed)) continue;
    Anchor a{indexed ? "anchor, indexed" : "anchor", indexed ? "anchor_indexed" : "anchor_plain",
             fmt::format("{}/metrics-ingest-anchor.{}.{}.db", o.db_dir, getpid(), indexed ? "indexed" : "plain"), nullptr, {}};
    a.store = std::make_unique<SqliteAnchor>(a.db, indexed);
    anchors.push_back(std::move(a));
  }

  const int64_t t0 = NowMs() / 1000 * 1000;
  Stage build, parse, ours;
  size_t body_bytes = 0;
  int64_t points = 0;
  std::vector<std::string> bodies(static_cast<size_t>(o.nodes));
  std::vector<std::vector<protocol::NodeSample>> parsed(static_cast<size_t>(o.nodes));
  for (int round = 0; round < o.seconds / 2; ++round) {
    build.Start();  // not part of the figure: the agents' work
    for (int n = 0; n < o.nodes; ++n) {
      const auto& ids = task_ids[static_cast<size_t>(n)];
      std::vector<protocol::NodeSample> two = {feed.Sample(n + 1, t0 + (2 * round) * 1000, ids),
                                              feed.Sample(n + 1, t0 + (2 * round + 1) * 1000, ids)};
      bodies[static_cast<size_t>(n)] = Body(two);
      body_bytes += bodies[static_cast<size_t>(n)].size();
    }
    build.Stop();
    parse.Start();
    for (int n = 0; n < o.nodes; ++n) {
      json b = json::parse(bodies[static_cast<size_t>(n)]);
      auto s = protocol::ParseSamples(b["samples"]);
      if (!s.ok()) Die(s.status().ToString());
      parsed[static_cast<size_t>(n)] = std::move(*s);
    }
    parse.Stop();
    ours.Start();
    for (int n = 0; n < o.nodes; ++n) mon.IngestNode(n + 1, parsed[static_cast<size_t>(n)], tasks_here[static_cast<size_t>(n)]);
    ours.Stop();
    for (Anchor& a : anchors) {
      a.stage.Start();
      for (int n = 0; n < o.nodes; ++n) a.store->Heartbeat(n + 1, parsed[static_cast<size_t>(n)]);
      a.stage.Stop();
    }
    points += int64_t{2} * o.nodes * per_node;
  }
  const double sim = 2.0 * (o.seconds / 2);
  const double hbs = static_cast<double>(o.nodes) * (o.seconds / 2);
  const size_t series = mon.series().series();
  if (series != static_cast<size_t>(o.nodes) * static_cast<size_t>(per_node) || mon.series().dropped() != 0) {
    Die(fmt::format("the store holds {} series ({} dropped), expected {}", series, mon.series().dropped(), o.nodes * per_node));
  }
  std::printf("heartbeats %.0f, points %lld, body %.0f bytes on average (building them, untimed: %.2f s CPU)\n", hbs,
              static_cast<long long>(points), static_cast<double>(body_bytes) / hbs, build.cpu);
  std::printf("\n%-44s %9s %9s %13s %13s %15s\n", "stage", "cpu s", "wall s", "us/heartbeat", "cores at 1 s",
              "per 1000 nodes");
  auto line = [&](const std::string& name, double cpu, double wall) {
    std::printf("%-44s %9.2f %9.2f %13.1f %13.3f %15.3f\n", name.c_str(), cpu, wall, cpu / hbs * 1e6, cpu / sim,
                cpu / sim * 1000.0 / o.nodes);
  };
  line("parse (json::parse + ParseSamples)", parse.cpu, parse.wall);
  line("ours: Monitor::IngestNode", ours.cpu, ours.wall);
  for (const Anchor& a : anchors) line(a.name + ": SQLite INSERT per point", a.stage.cpu, a.stage.wall);
  line("ours, total (parse + ingest)", parse.cpu + ours.cpu, parse.wall + ours.wall);
  for (const Anchor& a : anchors) {
    line(a.name + ", total (parse + INSERT)", parse.cpu + a.stage.cpu, parse.wall + a.stage.wall);
  }
  const double ours_per1000 = (parse.cpu + ours.cpu) / sim * 1000.0 / o.nodes;
  std::printf("\nRESULT ingest_cores_per_1000_nodes ours %.3f (target <= 1)\n", ours_per1000);
  for (const Anchor& a : anchors) {
    const double per1000 = (parse.cpu + a.stage.cpu) / sim * 1000.0 / o.nodes;
    std::printf("RESULT %s %.3f: %.1fx ours (the stores alone: %.1fx)\n", a.key.c_str(), per1000, per1000 / ours_per1000,
                a.stage.cpu / ours.cpu);
  }

  // Memory.
  const size_t mem = mon.series().MemoryBytes();
  const size_t per_series_full = mon.series().BytesPerSeries();
  std::printf("\nmemory after %.0f s: MemoryBytes %zu (%.1f MiB), %.0f bytes per node, %.0f per series\n", sim, mem,
              static_cast<double>(mem) / (1 << 20), static_cast<double>(mem) / o.nodes,
              static_cast<double>(mem) / static_cast<double>(series));
  std::printf("steady state, nominal: BytesPerSeries %zu x %d series = %zu bytes per node (%.0f MiB for 1,000 nodes)\n",
              per_series_full, per_node, per_series_full * static_cast<size_t>(per_node),
              static_cast<double>(per_series_full * static_cast<size_t>(per_node)) * 1000 / (1 << 20));
  const auto hours = SteadyState(per_node, 25);
  const double h1 = static_cast<double>(hours[1]) / per_node, h24 = static_cast<double>(hours[24]) / per_node,
               h25 = static_cast<double>(hours[25]) / per_node;
  std::printf("steady state, measured (%d series fed 25 h of 1 s points, MemoryBytes): per series %.0f bytes at 1 h, "
              "%.0f at 24 h, %.0f at 25 h; per node %.0f at 24 h (%.0f MiB for 1,000 nodes)\n",
              per_node, h1, h24, h25, h24 * per_node, h24 * per_node * 1000 / (1 << 20));
  std::printf("growth per node per hour: nominal %d bytes (the 1-min tier: 60 points x 8 bytes x %d series, hours 1-24; "
              "then none); measured %.0f (mean of hours 1-24), %.0f (hour 25)\n",
              60 * 8 * per_node, per_node, (h24 - h1) * per_node / 23, (h25 - h24) * per_node);
  for (Anchor& a : anchors) {
    const int64_t disk = a.store->DiskBytes();
    std::printf("%s: %.1f MiB on disk after %.0f s, %.0f bytes per node per hour (and growing until rows are deleted)\n",
                a.name.c_str(), static_cast<double>(disk) / (1 << 20), sim,
                static_cast<double>(disk) / o.nodes / sim * 3600);
    a.store.reset();
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((a.db + suffix).c_str());
  }
  return 0;
}

// ---- http

struct HttpOptions {
  std::string url, admin_token_file, tokens_file;
  int nodes = 200, seconds = 60, connections = 8, gpus = 2, tasks = 7, warmup = 6;
  int server_pid = 0;
};

struct Node {
  std::string name, token;
  int64_t id = 0;
  std::vector<int64_t> task_ids;
  int64_t phase_ms = 0;   // its own 1 s clock's offset
  int64_t last_t = 0;     // its last sample's time
};

// utime + stime of a process, in seconds.
double ProcessCpu(int pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = s.rfind(')');
  if (close == std::string::npos) Die(fmt::format("/proc/{}/stat: unreadable", pid));
  std::istringstream f(s.substr(close + 2));
  std::vector<std::string> fields;
  for (std::string x; f >> x;) fields.push_back(x);
  // Fields from the state (field 3) on: utime is field 14, stime 15.
  if (fields.size() < 13) Die(fmt::format("/proc/{}/stat: short", pid));
  return static_cast<double>(std::stoll(fields[11]) + std::stoll(fields[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::unique_ptr<httplib::Client> Client(const std::string& url) {
  auto c = std::make_unique<httplib::Client>(url);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);
  c->set_read_timeout(std::chrono::seconds(30));
  c->set_write_timeout(std::chrono::seconds(30));
  return c;
}

// Runs fn(i, client) for i in [0, n) on `threads` threads, one keep-alive client each.
template <typename Fn>
void Parallel(const std::string& url, int n, int threads, Fn fn) {
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      auto c = Client(url);
      for (int i = t; i < n; i += threads) fn(i, *c);
    });
  }
  for (auto& t : ts) t.join();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) Die(path + ": cannot read");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())))];
}

int RunHttp(const HttpOptions& o) {
  const std::string admin = "Bearer " + ReadFile(o.admin_token_file);
  std::vector<Node> nodes;
  {
    std::istringstream in(ReadFile(o.tokens_file));
    for (std::string name, token; in >> name >> token;) {
      Node n;
      n.name = name;
      n.token = "Bearer " + token;
      nodes.push_back(std::move(n));
    }
  }
  if (static_cast<int>(nodes.size()) < o.nodes) Die(fmt::format("{}: {} tokens, {} nodes asked", o.tokens_file, nodes.size(), o.nodes));
  nodes.resize(static_cast<size_t>(o.nodes));
  const int conns = std::max(1, o.connections);
  std::printf("metrics_ingest http: %d nodes x %d series, a heartbeat per node every 2 s from %d keep-alive connections "
              "(%.0f/s), %d s per phase, server pid %d\n",
              o.nodes, 7 + 4 * o.gpus + 5 * o.tasks, conns, o.nodes / 2.0, o.seconds, o.server_pid);
  std::fflush(stdout);

  // Register each node: 2 GPUs, room for its tasks, a label its jobs select.
  json gpus = json::array();
  for (int g = 0; g < o.gpus; ++g) gpus.push_back({{"model", "NVIDIA H100"}, {"memory_bytes", int64_t{80} << 30}});
  Parallel(o.url, o.nodes, conns, [&](int i, httplib::Client& c) {
    Node& n = nodes[static_cast<size_t>(i)];
    json body = {{"name", n.name}, {"cpu_milli", 64'000}, {"memory_bytes", int64_t{512} << 30}, {"gpus", gpus},
                 {"labels", {{"bench", n.name}}}, {"agent_version", "metrics-ingest"},
                 {"port_lo", 40'000}, {"port_hi", 40'999}};
    auto r = c.Post("/api/v1/agent/register", {{"Authorization", n.token}}, body.dump(), "application/json");
    if (!r || r->status != 200) Die(fmt::format("register {}: {}", n.name, r ? r->body : httplib::to_string(r.error())));
    n.id = json::parse(r->body).at("node_id").get<int64_t>();
    n.phase_ms = (static_cast<int64_t>(i) * 7919) % 1000;
  });

  // Heartbeats, from here on: phase -1 stops them, 0 sends none of the
  // samples, 1 sends them.
  std::atomic<int> phase{1};
  std::atomic<int> epoch{0};  // which measurement a heartbeat counts for
  struct Counts {
    std::mutex mu;
    std::vector<double> ms[4];
    int64_t failed[4] = {0, 0, 0, 0};
    int64_t samples[4] = {0, 0, 0, 0};
  } counts;
  std::atomic<bool> placed{false};  // every node's task_ids are set (written once, before this)
  std::vector<std::thread> beaters;
  for (int t = 0; t < conns; ++t) {
    beaters.emplace_back([&, t] {
      auto c = Client(o.url);
      Feed feed(o.gpus, o.tasks, 1000 + static_cast<uint64_t>(t));
      std::vector<Node*> mine;
      for (int i = t; i < o.nodes; i += conns) mine.push_back(&nodes[static_cast<size_t>(i)]);
      if (mine.empty()) return;
      const auto start = SteadyClock::now();
      for (int64_t k = 0;; ++k) {
        for (size_t j = 0; j < mine.size(); ++j) {
          const auto due = start + std::chrono::milliseconds(k * 2000 + static_cast<int64_t>(j) * 2000 / static_cast<int64_t>(mine.size()));
          std::this_thread::sleep_until(due);
          const int p = phase.load();
          if (p < 0) return;
          Node& n = *mine[j];
          std::vector<protocol::NodeSample> samples;
          // Every whole second of the node's clock since its last sample (at most the agent's cap).
          const int64_t now = NowMs();
          const int64_t last_due = (now - n.phase_ms) / 1000 * 1000 + n.phase_ms;
          if (n.last_t == 0 || last_due - n.last_t > 120'000) n.last_t = last_due - 2000;
          if (p == 1 && placed.load(std::memory_order_acquire)) {
            for (int64_t ts = n.last_t + 1000; ts <= last_due; ts += 1000) samples.push_back(feed.Sample(n.id, ts, n.task_ids));
          }
          n.last_t = last_due;
          const std::string body = Body(samples);
          const int e = epoch.load();
          const auto t0 = SteadyClock::now();
          auto r = c->Post(fmt::format("/api/v1/agent/nodes/{}/heartbeat", n.id), {{"Authorization", n.token}}, body,
                           "application/json");
          const double ms = std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
          std::lock_guard<std::mutex> l(counts.mu);
          if (!r || r->status != 200) {
            if (counts.failed[e]++ == 0) {
              std::fprintf(stderr, "heartbeat %s: %s\n", n.name.c_str(), r ? r->body.c_str() : httplib::to_string(r.error()).c_str());
            }
          } else {
            counts.ms[e].push_back(ms);
            counts.samples[e] += static_cast<int64_t>(samples.size());
          }
        }
      }
    });
  }

  // Place the tasks: jobs that only this node can take, sleeping (no agent runs them).
  const auto submit0 = SteadyClock::now();
  Parallel(o.url, o.nodes * o.tasks, conns, [&](int i, httplib::Client& c) {
    const Node& n = nodes[static_cast<size_t>(i / o.tasks)];
    json spec = {{"name", fmt::format("mi-{}-{}", n.name, i % o.tasks)},
                 {"command", {"sleep", "600"}},
                 {"resources", {{"cpu", 0.1}, {"memory", "64Mi"}}},
                 {"node_selector", {{"bench", n.name}}}};
    auto r = c.Post("/api/v1/jobs", {{"Authorization", admin}}, spec.dump(), "application/json");
    if (!r || r->status != 201) Die(fmt::format("submit: {}", r ? r->body : httplib::to_string(r.error())));
  });
  // Until every node has its tasks placed; then their ids go into its samples.
  for (int tries = 0;; ++tries) {
    std::atomic<int> short_of{0};
    std::vector<std::vector<int64_t>> ids(nodes.size());
    Parallel(o.url, o.nodes, conns, [&](int i, httplib::Client& c) {
      const Node& n = nodes[static_cast<size_t>(i)];
      auto r = c.Get(fmt::format("/api/v1/agent/nodes/{}/assignments", n.id), {{"Authorization", n.token}});
      if (!r || r->status != 200) Die(fmt::format("assignments {}: {}", n.name, r ? r->body : httplib::to_string(r.error())));
      const json a = json::parse(r->body);
      for (const json& t : a.at("tasks")) ids[static_cast<size_t>(i)].push_back(t.at("task_id").get<int64_t>());
      if (static_cast<int>(ids[static_cast<size_t>(i)].size()) < o.tasks) ++short_of;
    });
    if (short_of == 0) {
      for (size_t i = 0; i < nodes.size(); ++i) nodes[i].task_ids = ids[i];
      placed.store(true, std::memory_order_release);
      break;
    }
    if (tries >= 240) Die(fmt::format("{} nodes still without their {} tasks after 120 s", short_of.load(), o.tasks));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  std::printf("placed %d tasks on %d nodes in %.1f s\n", o.nodes * o.tasks, o.nodes,
              std::chrono::duration<double>(SteadyClock::now() - submit0).count());
  std::fflush(stdout);

  // Warm-up with samples (every series exists), then the two phases.
  std::this_thread::sleep_for(std::chrono::seconds(o.warmup));
  struct Measured {
    double server_cpu = 0, client_cpu = 0, wall = 0;
  } m[2];
  for (int p : {0, 1}) {
    phase = p;
    std::this_thread::sleep_for(std::chrono::seconds(2));  // a full round in the new phase before measuring
    const double s0 = ProcessCpu(o.server_pid), c0 = CpuSeconds(), w0 = WallSeconds();
    epoch = 1 + p;
    std::this_thread::sleep_for(std::chrono::seconds(o.seconds));
    epoch = 3;
    m[p] = {ProcessCpu(o.server_pid) - s0, CpuSeconds() - c0, WallSeconds() - w0};
  }
  phase = -1;
  for (auto& t : beaters) t.join();

  // What the server holds: every node's and task's series.
  auto c = Client(o.url);
  auto r = c->Get("/metrics", {{"Authorization", admin}});
  double series = -1, mem = -1;
  if (r && r->status == 200) {
    std::istringstream in(r->body);
    for (std::string l; std::getline(in, l);) {
      if (l.rfind("ringmaster_monitor_series ", 0) == 0) series = std::stod(l.substr(l.find(' ') + 1));
      if (l.rfind("ringmaster_monitor_memory_bytes ", 0) == 0) mem = std::stod(l.substr(l.find(' ') + 1));
    }
  }
  const int per_node = 7 + 4 * o.gpus + 5 * o.tasks;
  std::printf("server holds %.0f series (%d expected), %.1f MiB\n", series, o.nodes * per_node, mem / (1 << 20));
  std::printf("\n%-22s %12s %8s %10s %10s %10s %12s %14s %12s\n", "phase", "heartbeats/s", "failed", "samples/s", "p50 ms",
              "p99 ms", "server cores", "per 1000 nodes", "client cores");
  double per1000[2];
  for (int p : {0, 1}) {
    const auto& v = counts.ms[1 + p];
    per1000[p] = m[p].server_cpu / m[p].wall / o.nodes * 1000;
    std::printf("%-22s %12.1f %8lld %10.1f %10.2f %10.2f %12.3f %14.3f %12.3f\n", p ? "with samples" : "no samples",
                static_cast<double>(v.size()) / m[p].wall, static_cast<long long>(counts.failed[1 + p]),
                static_cast<double>(counts.samples[1 + p]) / m[p].wall, Pct(v, 50), Pct(v, 99),
                m[p].server_cpu / m[p].wall, per1000[p], m[p].client_cpu / m[p].wall);
  }
  std::printf("\nRESULT server_cores_per_1000_nodes heartbeats_with_samples %.3f no_samples %.3f samples_alone %.3f "
              "(target: <= 1 core for 1,000 nodes)\n",
              per1000[1], per1000[0], per1000[1] - per1000[0]);
  return counts.failed[1] + counts.failed[2] > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"metrics-ingest: the metrics pipeline's ingest cost (ours) against SQLite rows (the anchor)"};
  CoreOptions core;
  app.add_option("--nodes", core.nodes, "synthetic nodes")->capture_default_str();
  app.add_option("--seconds", core.seconds, "simulated seconds of feed")->capture_default_str();
  app.add_option("--gpus", core.gpus, "GPUs per node (4 series each)")->capture_default_str();
  app.add_option("--tasks", core.tasks, "tasks per node (5 series each)")->capture_default_str();
  app.add_option("--db-dir", core.db_dir, "where the anchor's SQLite database goes (removed after)")->capture_default_str();
  app.add_option("--anchor", core.anchor, "SQLite anchors to run: plain (the table alone), indexed (on (node, series, t_ms)), both, none")
      ->capture_default_str();
  HttpOptions http;
  CLI::App* h = app.add_subcommand("http", "heartbeats to a running `ringmaster server`, its CPU measured");
  h->add_option("--url", http.url, "the server's URL")->required();
  h->add_option("--admin-token-file", http.admin_token_file, "an admin token (to submit the jobs)")->required();
  h->add_option("--tokens", http.tokens_file, "\"NAME TOKEN\" lines: an agent token per node")->required();
  h->add_option("--server-pid", http.server_pid, "the server's pid (its CPU is measured)")->required();
  h->add_option("--nodes", http.nodes, "nodes")->capture_default_str();
  h->add_option("--seconds", http.seconds, "seconds per phase")->capture_default_str();
  h->add_option("--connections", http.connections, "keep-alive connections (a thread each)")->capture_default_str();
  h->add_option("--gpus", http.gpus, "GPUs per node")->capture_default_str();
  h->add_option("--tasks", http.tasks, "tasks per node")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (h->parsed()) return RunHttp(http);
  return RunCore(core);
}
