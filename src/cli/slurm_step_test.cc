// StepAgentOptions on Slurm's environment as srun gives it to one rank, and
// what a task's environment calls the GPUs Slurm bound (TaskGpuEnv): their
// physical indices, as for any agent's task.
#include "cli/slurm_step.h"

#include <gtest/gtest.h>

#include "agent/executor/process_executor.h"

namespace ringmaster::cli {
namespace {

using Env = std::map<std::string, std::string>;

// Rank 1 of Slurm job 812 on n2, with 2 CPUs, 1000 MiB per CPU and the node's GPUs 2 and 3.
Env GoodEnv() {
  return {{"SLURM_PROCID", "1"},          {"SLURM_JOB_ID", "812"},       {"SLURMD_NODENAME", "n2"},
          {"SLURM_CPUS_PER_TASK", "2"},   {"SLURM_MEM_PER_CPU", "1000"}, {"SLURM_STEP_GPUS", "2,3"},
          {"RINGMASTER_STEP_TOKENS", "tok0,tok1"}};
}

StepFlags Flags() {
  StepFlags f;
  f.server = "https://rm:8443";
  f.ca_file = "/etc/rm/ca.crt";
  f.node_prefix = "slurm-12-1-";
  f.data_dir = "/var/tmp/rm-steps";
  return f;
}

// The error's message, or "" when there is none.
std::string ErrorOf(const Env& env) {
  auto o = StepAgentOptions(env, Flags());
  return o.ok() ? "" : o.status().message();
}

TEST(StepAgentOptions, TheRanksNodeInventoryLabelsTokenAndDataDir) {
  agent::AgentOptions base;
  base.heartbeat_interval = std::chrono::milliseconds(1234);  // the agent's own: kept
  base.port_lo = 31000;
  auto o = StepAgentOptions(GoodEnv(), Flags(), base);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->server_url, "https://rm:8443");
  EXPECT_EQ(o->ca_file, "/etc/rm/ca.crt");
  EXPECT_EQ(o->token, "tok1");
  EXPECT_EQ(o->node_name, "slurm-12-1-1");
  EXPECT_EQ(o->data_dir, "/var/tmp/rm-steps/812.1");
  EXPECT_EQ(o->cpu_milli, 2000);
  EXPECT_EQ(o->memory_bytes, int64_t{2000} << 20);
  EXPECT_EQ(o->labels, (std::map<std::string, std::string>{{"slurm.job", "812"}, {"slurm.node", "n2"}, {"slurm.rank", "1"}}));
  ASSERT_TRUE(o->gpus.has_value());
  ASSERT_EQ(o->gpus->size(), 2u);
  EXPECT_EQ((*o->gpus)[0].index, 2);  // the node's nvidia2: Slurm's global index
  EXPECT_EQ((*o->gpus)[1].index, 3);
  EXPECT_EQ((*o->gpus)[1].model, "slurm gres gpu");
  EXPECT_EQ(o->tunnel_port, -1);
  EXPECT_EQ(o->network, "host");
  EXPECT_EQ(o->heartbeat_interval, std::chrono::milliseconds(1234));
  EXPECT_EQ(o->port_lo, 31000);  // the caller's to set
}

TEST(StepAgentOptions, TheTokenIsPickedByRank) {
  Env env = GoodEnv();
  env["RINGMASTER_STEP_TOKENS"] = "a,b,c";
  for (const auto& [rank, token] : std::map<std::string, std::string>{{"0", "a"}, {"1", "b"}, {"2", "c"}}) {
    env["SLURM_PROCID"] = rank;
    auto o = StepAgentOptions(env, Flags());
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_EQ(o->token, token);
    EXPECT_EQ(o->node_name, "slurm-12-1-" + rank);
    EXPECT_EQ(o->labels.at("slurm.rank"), rank);
  }
  env["SLURM_PROCID"] = "3";
  EXPECT_EQ(ErrorOf(env), "RINGMASTER_STEP_TOKENS: no token for rank 3 (it holds 3)");
  env["SLURM_PROCID"] = "1";
  env["RINGMASTER_STEP_TOKENS"] = "a,,c";
  EXPECT_EQ(ErrorOf(env), "RINGMASTER_STEP_TOKENS: no token for rank 1 (it holds 3)");
}

TEST(StepAgentOptions, EachMissingVariableIsNamed) {
  for (const char* name : {"SLURM_PROCID", "SLURM_JOB_ID", "SLURMD_NODENAME", "SLURM_CPUS_PER_TASK",
                           "RINGMASTER_STEP_TOKENS"}) {
    Env env = GoodEnv();
    env.erase(name);
    const std::string error = ErrorOf(env);
    EXPECT_EQ(error.rfind(std::string(name) + " is not set", 0), 0u) << name << ": " << error;
  }
  Env env = GoodEnv();
  env.erase("SLURM_MEM_PER_CPU");
  EXPECT_EQ(ErrorOf(env), "SLURM_MEM_PER_CPU is not set, nor SLURM_MEM_PER_NODE (submit with --mem-per-cpu)");
  env["SLURM_MEM_PER_NODE"] = "3000";  // per node instead: taken as it is
  auto o = StepAgentOptions(env, Flags());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->memory_bytes, int64_t{3000} << 20);
}

TEST(StepAgentOptions, GarbledNumbersAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"SLURM_PROCID", "-1"},         {"SLURM_PROCID", "one"},        {"SLURM_JOB_ID", "812+0"},
      {"SLURM_JOB_ID", "0"},          {"SLURM_CPUS_PER_TASK", "0"},   {"SLURM_CPUS_PER_TASK", "2.5"},
      {"SLURM_MEM_PER_CPU", "1000M"}, {"SLURM_MEM_PER_CPU", "0"},     {"SLURM_STEP_GPUS", "0,x"},
      {"SLURM_STEP_GPUS", "0,,1"},    {"SLURM_CPUS_PER_TASK", "99999999999999999999"}};
  for (const auto& [name, value] : cases) {
    Env env = GoodEnv();
    env[name] = value;
    const std::string error = ErrorOf(env);
    EXPECT_EQ(error.rfind(name + ": \"" + value + "\" is not", 0), 0u) << name << "=" << value << ": " << error;
  }
}

// Slurm's global indices, whatever CUDA_VISIBLE_DEVICES says (it counts from
// 0 where Slurm confines devices, and the task runs outside that confinement).
TEST(StepAgentOptions, TheGpusSlurmBoundByTheNodesIndices) {
  struct Case {
    std::optional<std::string> step, job, cuda, per_task;
    std::vector<int> indices;
    std::string model = "slurm gres gpu";
  };
  const std::vector<Case> cases = {
      {"0,1", std::nullopt, std::nullopt, std::nullopt, {0, 1}},
      {"2,3", std::nullopt, "0,1", std::nullopt, {2, 3}},          // devices confined: CUDA counts from 0
      {"2", "2,3", "0", "a100:1", {2}, "a100"},                    // the step's, not the job's
      {std::nullopt, "1,3", "0,1", std::nullopt, {1, 3}},          // no step's: the job's
      {std::nullopt, std::nullopt, "0,1", std::nullopt, {0, 1}},   // neither: CUDA's
      {"", "1", "0", std::nullopt, {}},                            // set and empty: no GPU
      {std::nullopt, std::nullopt, std::nullopt, std::nullopt, {}},
      {"1", std::nullopt, "NoDevFiles", std::nullopt, {1}},        // Slurm's indices still say which
  };
  for (const Case& c : cases) {
    Env env = GoodEnv();
    env.erase("SLURM_STEP_GPUS");
    if (c.step) env["SLURM_STEP_GPUS"] = *c.step;
    if (c.job) env["SLURM_JOB_GPUS"] = *c.job;
    if (c.cuda) env["CUDA_VISIBLE_DEVICES"] = *c.cuda;
    if (c.per_task) env["SLURM_GPUS_PER_TASK"] = *c.per_task;
    const std::string what = c.step.value_or("unset") + " / " + c.job.value_or("unset") + " / " + c.cuda.value_or("unset");
    auto o = StepAgentOptions(env, Flags());
    ASSERT_TRUE(o.ok()) << what << ": " << o.status().ToString();
    ASSERT_TRUE(o->gpus.has_value()) << what;  // never NVML's: only what Slurm bound
    std::vector<int> indices;
    for (const agent::GpuInfo& g : *o->gpus) {
      indices.push_back(g.index);
      EXPECT_EQ(g.model, c.model) << what;
    }
    EXPECT_EQ(indices, c.indices) << what;
  }
  Env env = GoodEnv();
  env.erase("SLURM_STEP_GPUS");
  env["CUDA_VISIBLE_DEVICES"] = "NoDevFiles";
  EXPECT_EQ(ErrorOf(env).rfind("CUDA_VISIBLE_DEVICES: \"NoDevFiles\": Slurm bound GPUs that have no device files", 0), 0u)
      << ErrorOf(env);
  env["CUDA_VISIBLE_DEVICES"] = "GPU-6a1b";  // a UUID is no device node's index
  EXPECT_EQ(ErrorOf(env), "CUDA_VISIBLE_DEVICES: \"GPU-6a1b\" is not a list of GPU indices");
  env.erase("CUDA_VISIBLE_DEVICES");
  env["SLURM_JOB_GPUS"] = "1,x";
  EXPECT_EQ(ErrorOf(env), "SLURM_JOB_GPUS: \"1,x\" is not a list of GPU indices");
}

TEST(StepAgentOptions, FlagsAreRequired) {
  StepFlags f = Flags();
  f.node_prefix = "";
  EXPECT_EQ(StepAgentOptions(GoodEnv(), f).status().message(), "--node-prefix is required");
  f = Flags();
  f.data_dir = "";
  EXPECT_EQ(StepAgentOptions(GoodEnv(), f).status().message(), "--data-dir is required");
}

// The task holds the node's GPUs 2 and 3 (Slurm's SLURM_STEP_GPUS=2,3): a
// process is told those indices, as any agent's task is; a container counts its own.
TEST(TaskGpuEnv, TheNodesIndicesOfTheGpusATaskHolds) {
  agent::TaskLaunch launch;
  launch.gpus = {2, 3};
  auto env = agent::TaskGpuEnv(launch);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "2,3");
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), "2,3");
  EXPECT_EQ(env.at("RINGMASTER_GPUS"), "2,3");
  launch.runtime = "runc";
  env = agent::TaskGpuEnv(launch);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "0,1");
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), "2,3");
  launch.runtime = "process";
  launch.gpus.clear();
  env = agent::TaskGpuEnv(launch);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "");
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), "void");
}

}  // namespace
}  // namespace ringmaster::cli
