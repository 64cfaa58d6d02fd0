// The simulator's policies on small traces whose schedules can be worked out
// by hand, with the fake clock (no sleeps), and the trace loader.
#include "sim/simulator.h"

#include "scheduler/scheduler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

namespace ringmaster::sim {
namespace {

TraceJob J(int64_t id, int64_t submit, int gpus, int64_t duration) {
  TraceJob j;
  j.id = id;
  j.submit_s = submit;
  j.gpus = gpus;
  j.duration_s = duration;
  return j;
}

SimOptions Cluster(int nodes, int gpus, Policy p) {
  SimOptions o;
  o.nodes = nodes;
  o.gpus_per_node = gpus;
  o.policy = p;
  return o;
}

// A: 2 GPUs for 100 s; B: all 4 GPUs; C: 2 GPUs for 50 s; D: 2 GPUs for 200 s.
std::vector<TraceJob> BlockedHead() { return {J(1, 0, 2, 100), J(2, 1, 4, 50), J(3, 2, 2, 50), J(4, 3, 2, 200)}; }

TEST(Simulator, FifoHeadBlocksEveryoneBehindIt) {
  SimResult r = Simulate(BlockedHead(), Cluster(1, 4, Policy::kFifo)).value();
  EXPECT_EQ(r.jobs, 4);
  // A 0-100, B 100-150, C and D start at 150: JCTs 100, 149, 198, 347.
  EXPECT_DOUBLE_EQ(r.avg_jct_s, (100 + 149 + 198 + 347) / 4.0);
  EXPECT_DOUBLE_EQ(r.makespan_s, 350);
}

TEST(Simulator, BackfillStartsShortJobsWithoutDelayingTheHeadsReservation) {
  SimResult r = Simulate(BlockedHead(), Cluster(1, 4, Policy::kBackfill)).value();
  // B's reservation is t=100 (when A ends). C (ends at 52) is backfilled at once;
  // D would run past 100 on GPUs B needs, so it waits. B still starts at 100.
  // A 100, B 100-150 -> 149, C 2-52 -> 50, D 150-350 -> 347.
  EXPECT_DOUBLE_EQ(r.avg_jct_s, (100 + 149 + 50 + 347) / 4.0);
  EXPECT_DOUBLE_EQ(r.avg_queue_s, (0 + 99 + 0 + 147) / 4.0);
}

TEST(Simulator, BackfillNeverDelaysTheHeadEvenWhenALongJobFitsNow) {
  // 1 node, 4 GPUs. A holds 3 GPUs for 100 s; the head B needs 4; C (1 GPU, 1000 s) fits now
  // but would hold a GPU B needs at t=100, so it must not start before B.
  SimResult r = Simulate({J(1, 0, 3, 100), J(2, 1, 4, 10), J(3, 2, 1, 1000)}, Cluster(1, 4, Policy::kBackfill)).value();
  // B 100-110 (JCT 109), C 110-1110 (JCT 1108).
  EXPECT_DOUBLE_EQ(r.avg_jct_s, (100 + 109 + 1108) / 3.0);
}

TEST(Simulator, LasPreemptsTheJobWithMoreAttainedServiceForANewcomer) {
  SimOptions o = Cluster(1, 1, Policy::kLas);
  o.las_thresholds_gpu_s = {50};
  o.restart_overhead_s = 30;
  o.min_run_s = 0;
  // A runs alone and passes 50 GPU-s at t=50; B arrives at 100 in the top level and preempts A.
  SimResult r = Simulate({J(1, 0, 1, 10000), J(2, 100, 1, 10)}, o).value();
  EXPECT_EQ(r.preemptions, 1);
  // B 100-110 (JCT 10); A resumes at 110 with 9900 s left plus 30 s restart: ends at 10040.
  EXPECT_DOUBLE_EQ(r.avg_jct_s, (10 + 10040) / 2.0);
  SimResult fifo = Simulate({J(1, 0, 1, 10000), J(2, 100, 1, 10)}, Cluster(1, 1, Policy::kFifo)).value();
  EXPECT_EQ(fifo.preemptions, 0);
  EXPECT_DOUBLE_EQ(fifo.avg_jct_s, (10000 + 9910) / 2.0);
}

TEST(Simulator, LasLeavesAJobAloneUntilItsLeaseEnds) {
  SimOptions o = Cluster(1, 1, Policy::kLas);
  o.las_thresholds_gpu_s = {50};
  o.restart_overhead_s = 30;
  o.min_run_s = 300;
  // B arrives at 100 but A's lease runs to 300: B preempts A then, and runs 300-310.
  // A restarts at 310 with a new lease to 610; C (arrived at 400) preempts it at 610, runs 610-620.
  // A has run 300 + 300 s and owes two restarts: 9400 + 60 s left from 620.
  SimResult r = Simulate({J(1, 0, 1, 10000), J(2, 100, 1, 10), J(3, 400, 1, 10)}, o).value();
  EXPECT_EQ(r.preemptions, 2);
  EXPECT_DOUBLE_EQ(r.avg_jct_s, ((620 + 9460) + 210 + 220) / 3.0);
}

TEST(Simulator, GangsLargerThanANodeTakeWholeNodesAndOversizedJobsAreSkipped) {
  // 16 GPUs = 2 whole nodes of 8; 64 GPUs cannot fit 4 x 8.
  SimResult r = Simulate({J(1, 0, 16, 10), J(2, 0, 64, 10), J(3, 0, 8, 10)}, Cluster(4, 8, Policy::kFifo)).value();
  EXPECT_EQ(r.jobs, 2);
  EXPECT_EQ(r.skipped, 1);
  EXPECT_DOUBLE_EQ(r.avg_jct_s, 10);  // both ran at once: 3 of 4 nodes
}

// The server's scheduler (Scheduler::Schedule) driven by the same events as the
// simulator: a pass at every arrival and completion, runtimes as time limits.
// Returns the average JCT.
double ReplayThroughTheScheduler(const std::vector<TraceJob>& trace, int nodes, int gpus, const std::string& policy) {
  scheduler::SchedulerConfig config;
  config.policy = policy;
  config.filters = {"gpu-type", "resources"};
  config.scores = {{"binpack", 1}, {"locality", 1}};
  auto sched = scheduler::Scheduler::Create(config);
  EXPECT_TRUE(sched.ok());
  scheduler::Snapshot snap;
  for (int i = 0; i < nodes; ++i) {
    scheduler::NodeState n;
    n.id = i;
    n.name = "n" + std::to_string(i);
    n.capacity = {1'000'000'000, int64_t{1} << 60, gpus};
    snap.nodes.push_back(n);
  }
  std::vector<scheduler::JobRequest> pending;
  std::vector<int64_t> ends;  // per running job, parallel to snap.running
  size_t next = 0;
  double jct_sum = 0;
  while (next < trace.size() || !ends.empty()) {
    int64_t now = INT64_MAX;
    if (next < trace.size()) now = trace[next].submit_s;
    for (int64_t e : ends) now = std::min(now, e);
    for (size_t r = 0; r < ends.size();) {  // completions first, as the simulator
      if (ends[r] > now) {
        ++r;
        continue;
      }
      const auto& rj = snap.running[r];
      snap.nodes[static_cast<size_t>(rj.node_ids[0])].allocated.gpus -= rj.request.per_task.gpus;
      jct_sum += static_cast<double>(now - trace[static_cast<size_t>(rj.request.job_id)].submit_s);
      snap.running.erase(snap.running.begin() + static_cast<std::ptrdiff_t>(r));
      ends.erase(ends.begin() + static_cast<std::ptrdiff_t>(r));
    }
    for (; next < trace.size() && trace[next].submit_s <= now; ++next) {
      scheduler::JobRequest j;
      j.job_id = static_cast<int64_t>(next);
      j.per_task.gpus = trace[next].gpus;
      j.submit_ms = trace[next].submit_s * 1000;
      j.expected_runtime_ms = trace[next].duration_s * 1000;
      pending.push_back(j);
    }
    snap.now_ms = now * 1000;
    scheduler::Plan plan = (*sched)->Schedule(snap, pending);
    for (const auto& p : plan.placements) {
      auto it = std::find_if(pending.begin(), pending.end(), [&](auto& j) { return j.job_id == p.job_id; });
      snap.nodes[static_cast<size_t>(p.node_ids[0])].allocated.gpus += it->per_task.gpus;
      snap.running.push_back({*it, p.node_ids, now * 1000, 0, false});
      ends.push_back(now + trace[static_cast<size_t>(p.job_id)].duration_s);
      pending.erase(it);
    }
  }
  return jct_sum / static_cast<double>(trace.size());
}

TEST(Simulator, ItsFifoAndBackfillMakeTheServerSchedulersSchedule) {
  std::mt19937_64 rng(7);
  std::vector<TraceJob> trace;
  for (int i = 0; i < 80; ++i) {
    const int gpus[] = {1, 1, 1, 2, 4};
    trace.push_back(J(i + 1, static_cast<int64_t>(rng() % 3000), gpus[rng() % 5], 10 + static_cast<int64_t>(rng() % 600)));
  }
  std::stable_sort(trace.begin(), trace.end(), [](auto& a, auto& b) { return a.submit_s < b.submit_s; });
  for (auto [policy, name] : {std::pair(Policy::kFifo, "fifo"), std::pair(Policy::kBackfill, "backfill")}) {
    SimResult sim = Simulate(trace, Cluster(2, 4, policy)).value();
    EXPECT_DOUBLE_EQ(sim.avg_jct_s, ReplayThroughTheScheduler(trace, 2, 4, name)) << name;
  }
  // And the two policies differ on this trace: the check compares something.
  EXPECT_NE(Simulate(trace, Cluster(2, 4, Policy::kFifo)).value().avg_jct_s,
            Simulate(trace, Cluster(2, 4, Policy::kBackfill)).value().avg_jct_s);
}

TEST(Trace, LoadsPhillyRowsSortedBySubmitTimeAndNamesABadLine) {
  auto path = std::filesystem::temp_directory_path() / ("philly-" + std::to_string(getpid()) + ".csv");
  {
    std::ofstream f(path);
    f << "timestamp,duration,num_gpus,gpu_time,cluster\n"
      << "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
      << "2017-10-09 06:13:03,2951.0,2,5902.0,6214e9\n";
  }
  auto jobs = LoadPhillyTrace(path.string());
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].submit_s, 0);
  EXPECT_EQ((*jobs)[0].gpus, 2);
  EXPECT_EQ((*jobs)[1].submit_s, 48 * 60 + 52);
  EXPECT_EQ((*jobs)[1].duration_s, 66);
  {
    std::ofstream f(path, std::ios::app);
    f << "yesterday,1,1,1,x\n";
  }
  auto bad = LoadPhillyTrace(path.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 4"), std::string::npos) << bad.status().message();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ringmaster::sim
