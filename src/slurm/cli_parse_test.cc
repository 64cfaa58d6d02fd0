// The parsers on what Slurm 22.05 printed on the test cluster
// (tests/fixtures/slurm.sh), pasted as it came.
#include "slurm/cli_parse.h"

#include <sys/wait.h>

#include <gtest/gtest.h>

namespace ringmaster::slurm {
namespace {

// squeue --me --states=all --noheader --Format=<kSqueueFormat>
constexpr std::string_view kSqueue =
    "4|CANCELLED|None|n1|15|rm-4.1\n"
    "9|CANCELLED|Resources||0|rm-11.1\n"
    "1|COMPLETED|None|n2|0|rm-1.1\n"
    "12|COMPLETED|None|n[1-2]|0|rm-20.1\n"
    "2|FAILED|NonZeroExitCode|n1|768|rm-2.1 with | bar and a very long name that goes on and on and on beyond fifty "
    "chars\n"
    "3|FAILED|JobLaunchFailure|n2|9|rm-3.1\n"
    "6|FAILED|BadConstraints||1|rm-7.1\n"
    "14|PENDING|ReqNodeNotAvail, UnavailableNodes:n1||0|rm-31.1\n"
    "16|PENDING|JobHeldUser||0|rm-33.1\n"
    "13|RUNNING|None|n2|0|rm-30.1\n"
    "17|TIMEOUT|TimeLimit|n2|15|rm-30.2\n"  // --time=1, a minute later
    "18|RUNNING|None|n1|0|someone-elses-job\n";

// sinfo --Node --noheader --Format=<kSinfoFormat>
constexpr std::string_view kSinfo =
    "n1|drained|0/0/4/4|4000|0|gpu:1|gpu:0|127.0.0.1|fan broken\n"
    "n2|mixed|1/3/0/4|4000|100|gpu:2|gpu:2|127.0.0.1|none\n";

const JobInfo* Find(const std::vector<JobInfo>& jobs, int64_t id) {
  for (const auto& j : jobs) {
    if (j.id == id) return &j;
  }
  return nullptr;
}

TEST(ParseSqueueTest, EveryStateOfTheFixture) {
  auto jobs = ParseSqueue(kSqueue, "rm-");
  ASSERT_EQ(jobs.size(), 11u);
  const JobInfo* j = Find(jobs, 12);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->name, "rm-20.1");
  EXPECT_EQ(j->state, "COMPLETED");
  EXPECT_EQ(j->reason, "");  // "None"
  EXPECT_EQ(j->nodes, "n[1-2]");
  EXPECT_EQ(j->exit_code, 0);
  EXPECT_EQ(j->exit_signal, 0);

  j = Find(jobs, 2);  // `exit 3`; a '|' in its name
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->name, "rm-2.1 with | bar and a very long name that goes on and on and on beyond fifty chars");
  EXPECT_EQ(j->state, "FAILED");
  EXPECT_EQ(j->reason, "NonZeroExitCode");
  EXPECT_EQ(j->exit_code, 3);
  EXPECT_EQ(j->exit_signal, 0);

  j = Find(jobs, 3);  // `kill -9 $$`
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->exit_code, 0);
  EXPECT_EQ(j->exit_signal, 9);

  j = Find(jobs, 4);  // scancel
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->state, "CANCELLED");
  EXPECT_EQ(j->exit_signal, 15);

  j = Find(jobs, 14);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->state, "PENDING");
  EXPECT_EQ(j->reason, "ReqNodeNotAvail, UnavailableNodes:n1");
  EXPECT_EQ(j->nodes, "");

  j = Find(jobs, 17);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->state, "TIMEOUT");
  EXPECT_EQ(j->reason, "TimeLimit");
  EXPECT_EQ(Find(jobs, 18), nullptr);  // not ours
}

TEST(ParseSqueueTest, PrefixAndDamagedLines) {
  auto jobs = ParseSqueue(kSqueue, "rm-30.");
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].id, 13);
  EXPECT_EQ(jobs[1].id, 17);
  EXPECT_TRUE(ParseSqueue("", "rm-").empty());
  // A name with a line break splits its line: both halves are dropped, the
  // lines around them kept.
  jobs = ParseSqueue("1|RUNNING|None|n1|0|rm-1.1\n2|RUNNING|None|n1|0|rm-x\nrm-y\nnot|a|job\n3|PENDING|Priority||0|rm-3.1\n",
                     "rm-");
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[2].id, 3);
  EXPECT_EQ(jobs[2].reason, "Priority");
  EXPECT_TRUE(ParseSqueue("12_3|RUNNING|None|n1|0|rm-array\n", "rm-").empty());  // an array task: not ours
}

TEST(ParseSinfoTest, TheFixturesNodes) {
  auto nodes = ParseSinfo(kSinfo);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].name, "n1");
  EXPECT_EQ(nodes[0].state, "drained");
  EXPECT_EQ(nodes[0].reason, "fan broken");
  EXPECT_EQ(nodes[0].cpus, 4);
  EXPECT_EQ(nodes[0].cpus_alloc, 0);
  EXPECT_EQ(nodes[0].memory_mib, 4000);
  EXPECT_EQ(nodes[0].gpus, 1);
  EXPECT_EQ(nodes[0].gpus_used, 0);
  EXPECT_EQ(nodes[0].gres, "gpu:1");
  EXPECT_EQ(nodes[0].address, "127.0.0.1");
  EXPECT_EQ(nodes[1].name, "n2");
  EXPECT_EQ(nodes[1].state, "mixed");
  EXPECT_EQ(nodes[1].reason, "");
  EXPECT_EQ(nodes[1].cpus_alloc, 1);
  EXPECT_EQ(nodes[1].memory_alloc_mib, 100);
  EXPECT_EQ(nodes[1].gpus, 2);
  EXPECT_EQ(nodes[1].gpus_used, 2);
}

TEST(ParseSinfoTest, FlagsPartitionsAndTypedGres) {
  auto nodes = ParseSinfo(
      "g1|down*|0/0/64/64|512000|0|gpu:a100:4(S:0-1),gpu:v100:2|gpu:a100:0(IDX:N/A),gpu:v100:0(IDX:N/A)|10.0.0.1|"
      "Not responding\n"
      "g1|down*|0/0/64/64|512000|0|gpu:a100:4(S:0-1),gpu:v100:2|gpu:a100:0(IDX:N/A),gpu:v100:0(IDX:N/A)|10.0.0.1|"
      "Not responding\n"
      "g2|draining@|8/56/0/64|512000|1000+|gpu:a100:4|gpu:a100:2(IDX:0,2)|g2|reboot | then drain\n"
      "c1|idle~|0/8/0/8|16000+|0|(null)|gpu:0|c1|none\n");
  ASSERT_EQ(nodes.size(), 3u);  // g1 is in two partitions
  EXPECT_EQ(nodes[0].state, "down+not_responding");
  EXPECT_EQ(nodes[0].gpus, 6);
  EXPECT_EQ(nodes[0].gpus_used, 0);
  EXPECT_EQ(nodes[0].reason, "Not responding");
  EXPECT_EQ(nodes[1].state, "draining+reboot_pending");
  EXPECT_EQ(nodes[1].gpus_used, 2);
  EXPECT_EQ(nodes[1].reason, "reboot | then drain");
  EXPECT_EQ(nodes[2].state, "idle+powered_down");
  EXPECT_EQ(nodes[2].memory_mib, 16000);
  EXPECT_EQ(nodes[2].gres, "");
  EXPECT_EQ(nodes[2].gpus, 0);
}

TEST(GpuCountTest, GresForms) {
  EXPECT_EQ(GpuCount("gpu:2"), 2);
  EXPECT_EQ(GpuCount("gpu:a100:2(IDX:0-1)"), 2);
  EXPECT_EQ(GpuCount("gpu:(null):0"), 0);
  EXPECT_EQ(GpuCount("gpu:(null):3(IDX:0-2)"), 3);
  EXPECT_EQ(GpuCount("gpu:2(IDX:0,2),mps:200,gpu:k80:1"), 3);
  EXPECT_EQ(GpuCount("(null)"), 0);
  EXPECT_EQ(GpuCount(""), 0);
  EXPECT_EQ(GpuCount("gpus:4"), 0);
}

TEST(ParseSbatchOutputTest, IdWithOrWithoutCluster) {
  EXPECT_EQ(*ParseSbatchOutput("12\n"), 12);
  EXPECT_EQ(*ParseSbatchOutput("4711;cluster2\n"), 4711);
  EXPECT_EQ(ParseSbatchOutput("").status().code(), StatusCode::kInternal);
  EXPECT_EQ(ParseSbatchOutput("Submitted batch job 3\n").status().code(), StatusCode::kInternal);
}

int Exited(int code) { return code << 8; }

TEST(CommandErrorTest, RefusedIsNotUnreachable) {
  // sbatch --gpus-per-task=5 on the fixture.
  Status s = CommandError("sbatch", Exited(1),
                          "sbatch: error: Batch job submission failed: Requested node configuration is not available\n",
                          StatusCode::kInvalidArgument);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "sbatch: Requested node configuration is not available");
  s = CommandError("sbatch", Exited(1),
                   "sbatch: error: invalid partition specified: nope\n"
                   "sbatch: error: Batch job submission failed: Invalid partition name specified\n",
                   StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "sbatch: Invalid partition name specified");
  // The controller down (after sbatch's own 9 s of retries).
  s = CommandError("sbatch", Exited(1),
                   "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n",
                   StatusCode::kInvalidArgument);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "sbatch: Unable to contact slurm controller (connect failure)");
  s = CommandError("squeue", Exited(1), "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n",
                   StatusCode::kInternal);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "squeue: Unable to contact slurm controller (connect failure)");
  s = CommandError("sinfo", Exited(1), "slurm_load_partitions: Unable to contact slurm controller (connect failure)\n",
                   StatusCode::kInternal);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  s = CommandError("sbatch", Exited(1),
                   "sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
                   "sbatch: error: fetch_config: DNS SRV lookup failed\n"
                   "sbatch: error: _establish_config_source: failed to fetch config\n"
                   "sbatch: fatal: Could not establish a configuration source\n",
                   StatusCode::kInvalidArgument);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "sbatch: Could not establish a configuration source");
  s = CommandError("sbatch", Exited(127), "env: 'sbatch': No such file or directory\n", StatusCode::kInvalidArgument);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  s = CommandError("scancel", Exited(1), "", StatusCode::kInternal);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("said nothing"), std::string::npos);
}

}  // namespace
}  // namespace ringmaster::slurm
