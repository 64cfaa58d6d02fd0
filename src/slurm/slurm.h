// Slurm as seen by the server's Slurm backend: submitting a gang as one batch
// job, reading the state of the jobs it submitted and of Slurm's nodes,
// cancelling. `Client` is the seam; `NewCliClient` drives the Slurm commands
// (sbatch, squeue, scontrol, scancel) with a deadline on each, so it works with
// any Slurm a site runs (munge authenticates the server's user) without
// slurmrestd, whose OpenAPI changes with every release. The text helpers
// (reasons, end states, the script) are pure. Clients are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ringmaster::slurm {

// One gang as one batch job: `ntasks` ranks, each with the same resources,
// launched by one srun step running `step_argv` once per rank.
struct SubmitRequest {
  std::string name;     // --job-name ("rm-12.1")
  std::string comment;  // --comment
  int ntasks = 1;
  int cpus_per_task = 1;
  int64_t memory_mib_per_task = 512;  // as --mem-per-cpu = ceil(memory / cpus)
  int gpus_per_task = 0;              // GRES gpu per rank: --gpus-per-task=[type:]N; 0 = none
  std::string gpu_type;               // a typed GRES ("a100"); "" = any
  int64_t time_limit_minutes = 0;     // --time; 0 = the partition's
  std::string partition, account, qos;  // "" = Slurm's default
  std::string work_dir = "/";           // --chdir
  std::string output = "/dev/null";     // --output (the step's own stdout/stderr, for admins)
  std::vector<std::string> step_argv;   // what srun runs once per rank
  // Exported by the script before srun (secrets go here, never on argv).
  std::map<std::string, std::string> env;
};

// A job as Slurm reports it (squeue / scontrol).
struct JobInfo {
  int64_t id = 0;
  std::string name;
  std::string state;   // Slurm's: PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, TIMEOUT,
                       // NODE_FAIL, OUT_OF_MEMORY, PREEMPTED, BOOT_FAIL, DEADLINE, SUSPENDED, REQUEUED, ...
  std::string reason;  // Slurm's reason code ("Resources", "Priority", ...); "" for None
  std::string nodes;   // Slurm's node list as it prints it ("n[1-2]"); "" while pending
  int exit_code = 0;   // of the batch script, once ended
  int exit_signal = 0;
};

// A node as Slurm reports it (scontrol show node / sinfo).
struct NodeInfo {
  std::string name;
  std::string state;   // lower case, Slurm's base state and flags: "idle", "mixed", "allocated", "down",
                       // "drained", "draining", "idle+drain", ...
  std::string reason;  // why down or drained ("" = none)
  int cpus = 0, cpus_alloc = 0;
  int64_t memory_mib = 0, memory_alloc_mib = 0;
  int gpus = 0, gpus_used = 0;  // GRES gpu, all types together
  std::string gres;             // Slurm's configured GRES text ("gpu:a100:2")
  std::string address;          // NodeAddr
};

class Client {
 public:
  virtual ~Client() = default;
  // The new job's id. InvalidArgument (Slurm's message) when Slurm refuses the
  // request itself (no node could ever run it, an unknown partition or QOS);
  // Unavailable / DeadlineExceeded when Slurm could not be reached: retry later.
  virtual StatusOr<int64_t> Submit(const SubmitRequest& request) = 0;
  // The jobs of this client's user whose name starts with `name_prefix`, in
  // every state Slurm still remembers (ended ones for MinJobAge).
  virtual StatusOr<std::vector<JobInfo>> Jobs(std::string_view name_prefix) = 0;
  virtual StatusOr<std::vector<NodeInfo>> Nodes() = 0;
  // scancel: Slurm signals the job's steps (SIGTERM, then SIGKILL after its
  // KillWait). Ok for a job that has ended already.
  virtual Status Cancel(int64_t job_id) = 0;
  // For messages: "slurm (SLURM_CONF=/etc/slurm/slurm.conf)".
  virtual std::string Describe() const = 0;
};

struct CliOptions {
  std::string bin_dir;  // where sbatch and the others are; "" = PATH
  std::string conf;     // SLURM_CONF for the commands; "" = Slurm's default
  std::chrono::milliseconds timeout{20'000};  // each command's deadline
};
std::unique_ptr<Client> NewCliClient(CliOptions options);

// sbatch's options for a request (without the script), in a fixed order.
std::vector<std::string> SbatchArgs(const SubmitRequest& request);
// The batch script: `#!/bin/sh`, the exports (values shell-quoted), `exec srun ... step_argv`
// (one rank: `exec step_argv` in the batch step itself).
std::string BatchScript(const SubmitRequest& request);

// Ok, or InvalidArgument naming what sbatch or the script could not carry: a
// line break in any field, argument or environment value (squeue prints one
// job a line), an environment name that is not [A-Za-z_][A-Za-z0-9_]*, no
// tasks, CPUs, memory or step. Submit checks it first.
Status CheckRequest(const SubmitRequest& request);
// `word` as one POSIX shell word: as is when it has only characters no
// shell treats specially, else in single quotes ('\'' for a quote).
std::string ShellQuote(std::string_view word);

// Slurm's pending reason in words a user can act on: "Resources" -> "waiting
// for resources: the nodes that could run it are busy"; an unknown code ->
// "Slurm says: <code>". Never empty for a non-empty code.
std::string PendingReasonText(std::string_view reason);
// A pending reason Slurm gives a job that cannot start as it is asked for
// (BadConstraints, PartitionTimeLimit, InvalidQOS, ...): waiting does not help.
bool NeverStarts(std::string_view reason);

enum class EndKind {
  kNotEnded,     // pending, running, completing, suspended, requeued
  kCompleted,    // the script exited 0
  kFailed,       // the script exited non-zero
  kCancelled,    // scancel
  kTimeout,      // Slurm's time limit
  kNodeFail,     // a node of the job failed (also BOOT_FAIL, PREEMPTED: not the job's fault)
  kOutOfMemory,  // OUT_OF_MEMORY
  kDeadline,     // DEADLINE
};
EndKind EndOf(std::string_view state);

}  // namespace ringmaster::slurm
