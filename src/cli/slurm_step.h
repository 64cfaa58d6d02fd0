// `ringmaster slurm-step`: one rank of a gang the server submitted to Slurm
// (one srun step, one wrapper per rank). A one-task agent: it registers the
// node <prefix><rank> with what Slurm bound to the rank, runs the task the
// server assigns it, and exits when that task is over. Not thread-safe.
#pragma once

#include <map>
#include <string>

#include "agent/agent.h"
#include "common/status.h"

namespace ringmaster::cli {

struct StepFlags {
  std::string server;       // the server's URL
  std::string ca_file;      // for an https server ("" = the system's CAs)
  std::string node_prefix;  // the node is <node_prefix><rank>
  std::string data_dir;     // each rank's agent data in <data_dir>/<job id>.<rank>, removed at exit
  std::string sandbox_root;  // where tasks' sandboxes go; "" = the agent's default
  std::string gpu_devices;   // where the GPUs' device nodes (nvidiaN) are; "" = the agent's default
  double assign_timeout_s = 300;
  // SIGTERM to SIGKILL when Slurm ends the step: with Abandon's slack (3 s)
  // well within Slurm's KillWait (30 s by default), after which Slurm SIGKILLs the wrapper.
  double grace_s = 10;
};

// How RunSlurmStep ends (what Slurm records as the step's exit code).
constexpr int kStepDone = 0;           // the task ended and was reported, or was cancelled
constexpr int kStepBadEnvironment = 2;  // a Slurm variable or a flag is missing or garbled
constexpr int kStepNoTask = 3;         // nothing was assigned within --assign-timeout
constexpr int kStepSignalled = 143;    // SIGTERM/SIGINT: the task was stopped, its end not reported

// `base` (the ordinary agent's options) with what Slurm's environment `env`
// says of this rank: SLURM_PROCID, SLURM_JOB_ID, SLURMD_NODENAME,
// SLURM_CPUS_PER_TASK, SLURM_MEM_PER_CPU or SLURM_MEM_PER_NODE (MiB), the GPUs
// by the node's indices (SLURM_STEP_GPUS, else SLURM_JOB_GPUS, else
// CUDA_VISIBLE_DEVICES: each GpuInfo's index is nvidia<index>) and RINGMASTER_STEP_TOKENS
// (token i for rank i). Every field but the ports. InvalidArgument names the
// variable that is missing or garbled.
StatusOr<agent::AgentOptions> StepAgentOptions(const std::map<std::string, std::string>& env, const StepFlags& flags,
                                               agent::AgentOptions base = {});

// Runs the step; one of the exit codes above. Only as root (kStepBadEnvironment
// otherwise): each task runs as its user's own uid.
int RunSlurmStep(const StepFlags& flags);

}  // namespace ringmaster::cli
