// SlurmBackend: the server's side of `--backend slurm`. Each handed-over gang
// (JobService::ExternalGangs) becomes one Slurm batch job named
// rm-<site>-<job>.<attempt>, whose one srun step runs `ringmaster slurm-step` per rank
// (a one-task agent with a token for its step node only). A loop keeps the two
// in step: it submits what Slurm lacks, gives a waiting job Slurm's pending
// reason in words, cancels what Ringmaster stopped, ends a gang as its Slurm
// job ended (a node failure requeues it), cancels Slurm jobs no gang owns, and
// forgets step nodes and tokens whose job is over. Slurm's own record (the job
// name) is the link, so a restarted server picks up where it left.
// Thread-safe: the loop on a thread of its own; Nodes() from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "server/job_service.h"
#include "slurm/slurm.h"
#include "store/meta_store.h"

namespace ringmaster::server {

struct SlurmBackendOptions {
  // This installation's mark in its Slurm jobs' names ("rm-<site>-<job>.<attempt>");
  // "" = derived from its store at Start.
  std::string site;
  std::string server_url;    // where the steps reach this server
  std::string ca_file;       // the CA the steps trust for https ("" = the system's)
  std::string step_command;  // the ringmaster binary on Slurm's nodes
  std::string step_data_dir = "/var/tmp/ringmaster-slurm";  // on each node: <dir>/<slurm job>.<rank>
  std::string sandbox_root;  // tasks' work dirs on each node; "" = the agent's default
  std::string output = "/dev/null";  // the batch job's own output (%j: its id), for admins
  std::string partition, account, qos;
  std::chrono::milliseconds interval{1000};
  // After Slurm says a job ended, how long its steps' last reports may still
  // come before the tasks that did not report are ended by Slurm's word.
  int64_t report_grace_ms = 5'000;
  // A running gang told to stop whose Slurm job is still there after this
  // (its steps did not stop their tasks) is cancelled in Slurm.
  int64_t stop_deadline_ms = 60'000;
  int submit_threads = 4;
  // A job Slurm says cannot start (slurm::NeverStarts) for this long fails.
  int64_t never_starts_after_ms = 30'000;
  int64_t nodes_interval_ms = 5'000;  // how often Slurm's nodes are read
};

class SlurmBackend {
 public:
  // `jobs`, `store`, `client`, `clock` outlive the backend.
  SlurmBackend(JobService* jobs, store::MetaStore* store, slurm::Client* client, Clock* clock,
               SlurmBackendOptions options);
  ~SlurmBackend();

  // Open, then the loop on a thread of its own.
  void Start();
  // Who the steps' tokens belong to, and the site (unless given).
  void Open();
  void Stop();
  // Run a round soon (a gang was handed over, or one is to stop). Never blocks.
  void Wake();
  // One round of the loop; tests call it.
  Status SyncOnce();

  // Slurm's nodes as last read ("" error: read fine).
  struct NodesView {
    std::vector<slurm::NodeInfo> nodes;
    std::string error;
    int64_t read_ms = 0;
  };
  NodesView Nodes() const;
  std::string Describe() const { return client_->Describe(); }

 private:
  Status Submit(const ExternalGang& gang);
  // Step nodes and their tokens whose gang attempt is no longer live.
  Status ForgetStepNodes(const std::set<std::pair<int64_t, int>>& live);
  void RefreshNodes();
  bool Stopping();
  void Loop();

  JobService* const jobs_;
  store::MetaStore* const store_;
  slurm::Client* const client_;
  Clock* const clock_;
  SlurmBackendOptions options_;  // its site is set by Start, before the loop runs
  int64_t agent_user_id_ = 0;  // who the steps' agent tokens belong to (the admin)

  // The loop's own state (only its thread touches it).
  std::map<int64_t, int64_t> ended_seen_ms_;  // Slurm job -> when this server first saw it ended
  std::map<int64_t, int64_t> cancelled_ms_;   // Slurm job -> when it was cancelled
  std::map<int64_t, int64_t> orphan_seen_ms_;  // Slurm job no gang owns -> since when
  std::map<int64_t, int64_t> never_seen_ms_;   // Slurm job that cannot start -> since when
  int64_t nodes_read_ms_ = 0;
  int64_t forgot_ms_ = 0;

  mutable std::mutex nodes_mu_;
  NodesView nodes_;  // GUARDED_BY(nodes_mu_)

  std::mutex mu_;
  std::condition_variable cv_;
  bool wake_ = false;      // GUARDED_BY(mu_)
  bool stopping_ = false;  // GUARDED_BY(mu_)
  std::thread loop_;
};

// The name of a step's agent token: this, then its node.
inline constexpr std::string_view kSlurmStepTokenPrefix = "slurm:";

// Slurm's job name for a gang's attempt: "rm-<site>-12.1".
std::string SlurmJobName(const std::string& site, int64_t job_id, int attempt);
// The request that runs a gang (pure: the tokens are given).
slurm::SubmitRequest SlurmRequest(const ExternalGang& gang, const SlurmBackendOptions& options,
                                  const std::vector<std::string>& tokens);

}  // namespace ringmaster::server
