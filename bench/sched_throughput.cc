// bench/sched_throughput: placements per second of one scheduling pass over
// 10,000 pending jobs on 1,000 and 10,000 simulated nodes (8 GPUs, 64 cpus,
// 512 GiB each), for each queue policy of the real scheduler
// (scheduler::Scheduler::Schedule with the default profile: health, gpu-type,
// labels and resources filters; binpack, locality and load-aware scores;
// Kubernetes-style adaptive limit on the nodes scored). Every job left waiting
// gets its pending reason, as in the server. A quarter of the cluster is busy
// with running jobs (with time limits, for backfill's reservations).
// Jobs are seeded: 1 GPU (70%), 2, 4 or 8 GPUs, a tenth of them gangs of 2-4,
// priorities 0-3, attained service exponential (mean 1 h) for LAS.
// Anchor: Slurm's backfill throughput is not measurable here (no slurmctld on
// this machine); the figure is ours alone, against the target of
// 5,000 placements/s at 10,000 nodes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "scheduler/scheduler.h"

using namespace ringmaster::scheduler;

namespace {

std::vector<NodeState> Nodes(int n) {
  std::vector<NodeState> nodes(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    nodes[static_cast<size_t>(i)].id = i + 1;
    nodes[static_cast<size_t>(i)].name = "n" + std::to_string(i + 1);
    nodes[static_cast<size_t>(i)].capacity = {64'000, int64_t{512} << 30, 8};
    nodes[static_cast<size_t>(i)].gpu_model = "NVIDIA H100";
  }
  return nodes;
}

std::vector<JobRequest> Jobs(int n, int64_t first_id, std::mt19937_64& rng) {
  std::vector<JobRequest> jobs;
  std::uniform_real_distribution<double> u(0, 1);
  std::exponential_distribution<double> attained(1.0 / 3600);
  for (int i = 0; i < n; ++i) {
    JobRequest j;
    j.job_id = first_id + i;
    j.submit_ms = j.job_id;
    double x = u(rng);
    int gpus = x < 0.7 ? 1 : x < 0.8 ? 2 : x < 0.9 ? 4 : 8;
    j.replicas = u(rng) < 0.1 ? 2 + static_cast<int>(u(rng) * 3) : 1;
    j.per_task = {4'000 * gpus, int64_t{16} << 30, gpus};
    j.priority = static_cast<int>(u(rng) * 4);
    j.attained_service_s = attained(rng);
    j.expected_runtime_ms = static_cast<int64_t>(60'000 * (1 + u(rng) * 600));
    j.user = "user" + std::to_string(static_cast<int>(u(rng) * 20));
    jobs.push_back(j);
  }
  return jobs;
}

}  // namespace

int main() {
  std::printf("sched_throughput: one pass, 10,000 pending jobs, a quarter of the cluster busy (seed 42)\n");
  std::printf("%-9s %6s %8s %9s %11s %10s %14s\n", "policy", "nodes", "pending", "placed", "preemptions", "pass_ms",
              "placements/s");
  for (int nodes_n : {1'000, 10'000}) {
    std::mt19937_64 rng(42);
    // Running work: jobs placed on an empty cluster until a quarter of the GPUs are taken.
    Snapshot snap{3'600'000, Nodes(nodes_n), {}};
    {
      auto s = Scheduler::Create(SchedulerConfig{});
      int64_t used = 0;
      for (const JobRequest& j : Jobs(nodes_n * 2, 1'000'000, rng)) {
        if (used >= nodes_n * 8 / 4) break;
        auto ids = (*s)->PlaceGang(snap.nodes, j);
        if (ids.empty()) continue;
        used += static_cast<int64_t>(j.per_task.gpus) * j.replicas;
        snap.running.push_back({j, ids, 0, 0, false});
      }
    }
    const std::vector<JobRequest> queue = Jobs(10'000, 1, rng);
    for (const char* policy : {"fifo", "priority", "backfill", "las"}) {
      SchedulerConfig config;
      config.policy = policy;
      config.las_min_run_ms = 0;
      auto sched = Scheduler::Create(config);
      if (!sched.ok()) {
        std::fprintf(stderr, "%s\n", sched.status().ToString().c_str());
        return 1;
      }
      auto t0 = std::chrono::steady_clock::now();
      Plan plan = (*sched)->Schedule(snap, queue);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%-9s %6d %8zu %9zu %11zu %10.1f %14.0f\n", policy, nodes_n, queue.size(), plan.placements.size(),
                  plan.preemptions.size(), secs * 1000, static_cast<double>(plan.placements.size()) / secs);
    }
  }
  return 0;
}
