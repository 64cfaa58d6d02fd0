// ringmaster-sim: replays a GPU-cluster trace through the scheduler's
// placement under each queue policy, with a fake clock, and prints one line
// per policy. See docs/scheduler-sim.md.
//   ringmaster-sim --trace data/traces/philly.csv --nodes 64 --gpus-per-node 8 --policy fifo,las,backfill
//     [--gpu-types k80:16,p100:24,v100:24 --throughputs data/traces/gavel_throughputs.json] [--seed S]
//   ringmaster-sim comm --bytes B --workers 1,2,3 --compute-s T --batch 64 [--rate 1gbit] [--exchange ring,ps]
//     the communication model (sim/comm_model.h): one CSV line per exchange and worker count
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include <fmt/format.h>

#include "common/strings.h"
#include "sim/comm_model.h"
#include "sim/simulator.h"

using namespace ringmaster::sim;
using ringmaster::Split;

namespace {

int CommMain(int argc, char** argv) {
  double bytes = 0, compute_s = 0;
  int batch = 64;
  std::string workers = "1,2,3", rate = "1gbit", exchanges = "ring,ps";
  LinkModel link;
  CLI::App app{"ringmaster-sim comm: a data-parallel step's exchange time and throughput on equal links"};
  app.add_option("--bytes", bytes, "gradient bytes per step")->required()->check(CLI::PositiveNumber);
  app.add_option("--compute-s", compute_s, "one worker's step time alone, seconds")->required()->check(CLI::NonNegativeNumber);
  app.add_option("--batch", batch, "samples per worker per step")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--workers", workers, "comma-separated worker counts")->capture_default_str();
  app.add_option("--rate", rate, "every host's link, as tc writes it")->capture_default_str();
  app.add_option("--payload-efficiency", link.payload_efficiency, "share of the rate that carries payload")
      ->check(CLI::Range(0.01, 1.0))->capture_default_str();
  app.add_option("--exchange", exchanges, "ring, ps (one parameter server on its own host)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!ParseRate(rate, &link.rate_bits_per_s)) {
    std::cerr << "ringmaster-sim comm: --rate: '" << rate << "' is not a rate (1gbit, 100mbit, ...)\n";
    return 2;
  }
  std::cout << "exchange,workers,exchange_s,serial_step_s,overlapped_step_s,serial_samples_per_s,overlapped_samples_per_s\n";
  for (std::string e : Split(exchanges, ',', {.skip_empty = false})) {
    if (e != "ring" && e != "ps") {
      std::cerr << "ringmaster-sim comm: --exchange: '" << e << "' is not ring or ps\n";
      return 2;
    }
    for (std::string w : Split(workers, ',', {.skip_empty = false})) {
      const int n = std::atoi(w.c_str());
      if (n < 1) {
        std::cerr << "ringmaster-sim comm: --workers: '" << w << "' is not a positive count\n";
        return 2;
      }
      auto p = PredictStep(e == "ring" ? Exchange::kRing : Exchange::kParameterServer, bytes, n, compute_s, batch, link);
      std::cout << fmt::format("{},{},{:.6f},{:.6f},{:.6f},{:.1f},{:.1f}\n", e, n, p.exchange_s, p.serial_step_s,
                               p.overlapped_step_s, p.serial_samples_per_s, p.overlapped_samples_per_s);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "comm") return CommMain(argc - 1, argv + 1);
  std::string trace_path, policies = "fifo,backfill,las", thresholds = "3600,36000", gpu_types, tput_path;
  SimOptions o;
  int64_t start = 0, max_jobs = 0;
  bool csv = false;
  CLI::App app{"ringmaster-sim: trace-driven simulation of Ringmaster's scheduler policies"};
  app.add_option("--trace", trace_path, "Philly-format CSV (timestamp,duration,num_gpus,gpu_time,cluster)")->required();
  app.add_option("--nodes", o.nodes, "simulated nodes")->check(CLI::Range(1, 1'000'000))->capture_default_str();
  app.add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--policy", policies, "comma-separated: fifo, backfill, las")->capture_default_str();
  app.add_option("--start", start, "replay jobs submitted this many seconds after the trace's first")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--jobs", max_jobs, "replay at most this many jobs (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--las-thresholds", thresholds, "LAS level boundaries, attained GPU-seconds")->capture_default_str();
  app.add_option("--backfill-depth", o.backfill_depth, "jobs backfill examines per pass")->capture_default_str();
  app.add_option("--restart-overhead", o.restart_overhead_s, "seconds a preempted job loses when it restarts")
      ->capture_default_str();
  app.add_option("--gpu-types", gpu_types, "heterogeneous cluster: type:nodes,... (replaces --nodes), e.g. k80:16,p100:24,v100:24");
  app.add_option("--throughputs", tput_path, "Gavel throughputs JSON: each job's speed per GPU type");
  app.add_option("--seed", o.seed, "seeds the models assigned to jobs")->capture_default_str();
  app.add_flag("--csv", csv, "CSV only");
  CLI11_PARSE(app, argc, argv);

  // A policy name with "+aware" places heterogeneity-aware; with --gpu-types
  // and no explicit --policy, every policy runs both ways.
  if (!gpu_types.empty() && app.count("--policy") == 0) policies = "fifo,fifo+aware,backfill,backfill+aware,las,las+aware";
  std::vector<std::pair<Policy, bool>> list;
  for (std::string name : Split(policies, ',', {.skip_empty = false})) {
    bool aware = false;
    if (name.size() > 6 && name.substr(name.size() - 6) == "+aware") {
      aware = true;
      name.resize(name.size() - 6);
    }
    Policy p;
    if (!ParsePolicy(name, &p)) {
      std::cerr << "ringmaster-sim: --policy: '" << name << "' is not one of fifo, backfill, las (each optionally +aware)\n";
      return 2;
    }
    list.push_back({p, aware});
  }
  for (std::string item : Split(gpu_types, ',', {.skip_empty = false})) {
    const size_t colon = item.find(':');
    int count = 0;
    try {
      count = colon == std::string::npos ? 0 : std::stoi(item.substr(colon + 1));
    } catch (...) {
    }
    if (colon == 0 || count < 1) {
      std::cerr << "ringmaster-sim: --gpu-types: '" << item << "' is not type:nodes (e.g. v100:24)\n";
      return 2;
    }
    o.gpu_types.push_back({item.substr(0, colon), count});
  }
  Throughputs throughputs;
  if (!tput_path.empty()) {
    auto t = LoadGavelThroughputs(tput_path);
    if (!t.ok()) {
      std::cerr << "ringmaster-sim: " << t.status().message() << "\n";
      return 1;
    }
    throughputs = std::move(*t);
    o.throughputs = &throughputs;
  }
  o.las_thresholds_gpu_s.clear();
  for (std::string v : Split(thresholds, ',', {.skip_empty = false})) {
    try {
      o.las_thresholds_gpu_s.push_back(std::stod(v));
    } catch (...) {
      std::cerr << "ringmaster-sim: --las-thresholds: '" << v << "' is not a number\n";
      return 2;
    }
  }

  auto loaded = LoadPhillyTrace(trace_path);
  if (!loaded.ok()) {
    std::cerr << "ringmaster-sim: " << loaded.status().message() << "\n";
    return 1;
  }
  std::vector<TraceJob> trace;
  for (const TraceJob& j : *loaded) {
    if (j.submit_s < start) continue;
    if (max_jobs > 0 && static_cast<int64_t>(trace.size()) >= max_jobs) break;
    trace.push_back(j);
  }
  if (trace.empty()) {
    std::cerr << "ringmaster-sim: no jobs after --start " << start << "\n";
    return 1;
  }
  if (!csv) {
    std::string cluster = fmt::format("{} nodes", o.nodes);
    if (!o.gpu_types.empty()) {
      cluster.clear();
      for (const auto& [type, n] : o.gpu_types) cluster += fmt::format("{}{} {}", cluster.empty() ? "" : " + ", n, type);
      cluster += " nodes";
    }
    std::cerr << fmt::format("ringmaster-sim: {} jobs from {}, {} x {} gpus{}\n", trace.size(), trace_path, cluster,
                             o.gpus_per_node, o.throughputs ? fmt::format(", models seeded with {}", o.seed) : "");
  }
  std::cout << "policy,jobs,avg_jct_s,median_jct_s,p95_jct_s,avg_queue_s,makespan_s,gpu_util\n";
  for (auto [p, aware] : list) {
    o.policy = p;
    o.heterogeneity_aware = aware;
    auto t0 = std::chrono::steady_clock::now();
    auto simulated = Simulate(trace, o);
    if (!simulated.ok()) {
      std::cerr << "ringmaster-sim: " << simulated.status().message() << "\n";
      return 2;
    }
    const SimResult& r = *simulated;
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << fmt::format("{},{},{:.0f},{:.0f},{:.0f},{:.0f},{:.0f},{:.3f}\n", r.policy, r.jobs, r.avg_jct_s,
                             r.median_jct_s, r.p95_jct_s, r.avg_queue_s, r.makespan_s, r.gpu_util)
              << std::flush;
    if (!csv) {
      std::cerr << fmt::format("  {}: {:.1f} s wall, {} passes, {} preemptions, {} jobs skipped (larger than the cluster)\n",
                               r.policy, secs, r.scheduling_passes, r.preemptions, r.skipped);
    }
  }
  return 0;
}
