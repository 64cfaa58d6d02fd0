#include "server/slurm_backend.h"

#include <future>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/crypto.h"
#include "common/strings.h"
#include "common/thread_name.h"

namespace ringmaster::server {
namespace {

constexpr std::string_view kNamePrefix = "rm-";  // then the site, "-", the job, ".", the attempt
constexpr std::string_view kTokenPrefix = kSlurmStepTokenPrefix;
constexpr int64_t kForgetIntervalMs = 10'000;
constexpr int64_t kTokenLifeMs = int64_t{30} * 24 * 3'600'000;

// "rm-<site>-12.1" -> (12, 1).
bool ParseSlurmJobName(const std::string& name, const std::string& site, int64_t* job_id, int* attempt) {
  const std::string prefix = fmt::format("{}{}-", kNamePrefix, site);
  if (name.rfind(prefix, 0) != 0) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return false;
  try {
    size_t used = 0;
    *job_id = std::stoll(name.substr(prefix.size(), dot - prefix.size()), &used);
    if (used != dot - prefix.size()) return false;
    *attempt = std::stoi(name.substr(dot + 1), &used);
    return used == name.size() - dot - 1 && *job_id > 0 && *attempt > 0;
  } catch (const std::exception&) {
    return false;
  }
}

// How a Slurm job's end applies to its gang, and in what words. A node
// failure requeues the gang even if it was stopping because a rank failed
// as the node went (EndExternalGang keeps a cancel a cancel).
std::pair<ExternalEnd, std::string> EndFor(const slurm::JobInfo& sj, bool stopping) {
  const std::string where = sj.nodes.empty() ? "" : " on " + sj.nodes;
  const slurm::EndKind end = slurm::EndOf(sj.state);
  if (end == slurm::EndKind::kNodeFail) {
    return {ExternalEnd::kRequeue, fmt::format("Slurm job {} lost a node{} ({})", sj.id, where, sj.state)};
  }
  if (stopping) return {ExternalEnd::kStopped, fmt::format("Slurm job {} ended ({})", sj.id, sj.state)};
  switch (end) {
    case slurm::EndKind::kTimeout:
    case slurm::EndKind::kDeadline:
      return {ExternalEnd::kFatal, fmt::format("time limit reached: Slurm ended job {} ({})", sj.id, sj.state)};
    case slurm::EndKind::kOutOfMemory:
      return {ExternalEnd::kFailed, fmt::format("out of memory: Slurm ended job {}{} (OUT_OF_MEMORY)", sj.id, where)};
    case slurm::EndKind::kCancelled:
      return {ExternalEnd::kFailed, fmt::format("Slurm job {} was cancelled outside Ringmaster (scancel)", sj.id)};
    default:
      return {ExternalEnd::kLost,
              fmt::format("Slurm job {} ended ({}, exit code {}{}) before this rank reported; its steps' output is "
                          "where the server's --slurm-output says",
                          sj.id, sj.state, sj.exit_code,
                          sj.exit_signal ? fmt::format(", signal {}", sj.exit_signal) : "")};
  }
}

}  // namespace

std::string SlurmJobName(const std::string& site, int64_t job_id, int attempt) {
  return fmt::format("{}{}-{}.{}", kNamePrefix, site, job_id, attempt);
}

slurm::SubmitRequest SlurmRequest(const ExternalGang& gang, const SlurmBackendOptions& options,
                                  const std::vector<std::string>& tokens) {
  const protocol::JobSpec& spec = *gang.spec;
  slurm::SubmitRequest r;
  r.name = SlurmJobName(options.site, gang.job_id, gang.attempt);
  // Every Slurm user may read comments: the job and attempt, not whose it is.
  r.comment = fmt::format("ringmaster job {} attempt {}", gang.job_id, gang.attempt);
  r.ntasks = gang.replicas;
  r.cpus_per_task = static_cast<int>(std::max<int64_t>(1, (spec.cpu_milli + 999) / 1000));
  r.memory_mib_per_task = std::max<int64_t>(1, (spec.memory_bytes + (1 << 20) - 1) >> 20);
  r.gpus_per_task = spec.gpus;
  // Slurm's GRES cannot say "any of these types": the first one the job accepts.
  if (spec.gpus > 0 && !spec.gpu_types.empty()) r.gpu_type = spec.gpu_types.front();
  // A minute past Ringmaster's own limit, which stops the gang gracefully first.
  if (spec.time_limit_ms > 0) r.time_limit_minutes = (spec.time_limit_ms + 59'999) / 60'000 + 1;
  r.partition = options.partition;
  r.account = options.account;
  r.qos = options.qos;
  r.output = options.output;
  r.step_argv = {options.step_command, "slurm-step", "--server", options.server_url};
  if (!options.ca_file.empty()) r.step_argv.insert(r.step_argv.end(), {"--ca-file", options.ca_file});
  r.step_argv.insert(r.step_argv.end(),
                     {"--node-prefix", fmt::format("slurm-{}-{}-", gang.job_id, gang.attempt), "--data-dir",
                      options.step_data_dir});
  if (!options.sandbox_root.empty()) r.step_argv.insert(r.step_argv.end(), {"--sandbox-root", options.sandbox_root});
  r.env["RINGMASTER_STEP_TOKENS"] = fmt::format("{}", fmt::join(tokens, ","));
  return r;
}

SlurmBackend::SlurmBackend(JobService* jobs, store::MetaStore* store, slurm::Client* client, Clock* clock,
                           SlurmBackendOptions options)
    : jobs_(jobs), store_(store), client_(client), clock_(clock), options_(std::move(options)) {}

SlurmBackend::~SlurmBackend() { Stop(); }

void SlurmBackend::Start() {
  Open();
  loop_ = std::thread([this] {
    NameThisThread("server-slurm");
    Loop();
  });
}

void SlurmBackend::Open() {
  auto admin = store_->GetUserByName("admin");
  if (admin.ok()) agent_user_id_ = admin->id;
  // The installation, as its store knows it (its first user's creation, kept
  // across failovers and migrations): another Ringmaster on the same Slurm, or
  // this one reinstalled, never takes this one's jobs for its own.
  if (options_.site.empty()) {
    options_.site = Sha256Hex(fmt::format("{}:{}", admin.ok() ? admin->id : 0, admin.ok() ? admin->created_ms : 0))
                        .substr(0, 6);
  }
}

void SlurmBackend::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (loop_.joinable()) loop_.join();
}

void SlurmBackend::Wake() {
  {
    std::lock_guard<std::mutex> l(mu_);
    wake_ = true;
  }
  cv_.notify_all();
}

void SlurmBackend::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, options_.interval, [this] { return stopping_ || wake_; });
      if (stopping_) return;
      wake_ = false;
    }
    if (Status st = SyncOnce(); !st.ok()) spdlog::warn("slurm: {}", st.ToString());
  }
}

bool SlurmBackend::Stopping() {
  std::lock_guard<std::mutex> l(mu_);
  return stopping_;
}

SlurmBackend::NodesView SlurmBackend::Nodes() const {
  std::lock_guard<std::mutex> l(nodes_mu_);
  return nodes_;
}

void SlurmBackend::RefreshNodes() {
  auto nodes = client_->Nodes();
  std::lock_guard<std::mutex> l(nodes_mu_);
  nodes_.read_ms = clock_->NowMs();
  if (nodes.ok()) {
    nodes_.nodes = std::move(*nodes);
    nodes_.error.clear();
  } else {
    nodes_.error = nodes.status().message();
  }
}

Status SlurmBackend::SyncOnce() {
  const int64_t now = clock_->NowMs();
  if (now - nodes_read_ms_ >= options_.nodes_interval_ms) {
    nodes_read_ms_ = now;
    RefreshNodes();
  }
  // Slurm's first, then the gangs: a gang handed over in between has no Slurm
  // job in this round's view and is submitted, which is right.
  RM_ASSIGN_OR_RETURN(auto slurm_jobs, client_->Jobs(fmt::format("{}{}-", kNamePrefix, options_.site)));
  RM_ASSIGN_OR_RETURN(auto gangs, jobs_->ExternalGangs());
  // The newest Slurm job of each name (a name is submitted once per attempt).
  std::map<std::string, const slurm::JobInfo*> by_name;
  for (const auto& sj : slurm_jobs) {
    auto& slot = by_name[sj.name];
    if (!slot || slot->id < sj.id) slot = &sj;
  }
  std::set<std::pair<int64_t, int>> live;
  std::vector<const ExternalGang*> to_submit;
  // One gang's error is logged and the round goes on: it never holds up the others.
  auto note = [](const Status& st) {
    if (!st.ok()) spdlog::warn("slurm: {}", st.ToString());
  };
  for (const ExternalGang& g : gangs) {
    live.insert({g.job_id, g.attempt});
    auto it = by_name.find(SlurmJobName(options_.site, g.job_id, g.attempt));
    if (it == by_name.end()) {
      if (g.stopping) {
        note(jobs_->EndExternalGang(g.job_id, g.attempt, ExternalEnd::kStopped, "it was not in Slurm"));
      } else if (g.bound) {
        note(jobs_->EndExternalGang(g.job_id, g.attempt, ExternalEnd::kLost,
                                    "its Slurm job is gone from Slurm's records"));
      } else {
        to_submit.push_back(&g);
      }
      continue;
    }
    const slurm::JobInfo& sj = *it->second;
    if (slurm::EndOf(sj.state) == slurm::EndKind::kNotEnded) {
      const bool overdue = g.bound && now - g.stop_since_ms > options_.stop_deadline_ms;
      if (g.stopping && (!g.bound || overdue) && !cancelled_ms_.count(sj.id)) {
        // Not started (or its steps did not stop their tasks): Slurm ends it.
        if (Status st = client_->Cancel(sj.id); !st.ok()) {
          spdlog::warn("slurm: cancelling job {} ({}): {}", sj.id, sj.name, st.ToString());
        } else {
          cancelled_ms_[sj.id] = now;
        }
      } else if (!g.bound && !g.stopping) {
        const bool pending = sj.state == "PENDING";
        if (pending && slurm::NeverStarts(sj.reason)) {
          // Waiting would not help (and would hold a place in Slurm's queue):
          // after a while (Slurm may say it of a job it has not fully placed yet) the job fails.
          auto [since, fresh] = never_seen_ms_.emplace(sj.id, now);
          if (now - since->second >= options_.never_starts_after_ms) {
            if (client_->Cancel(sj.id).ok()) cancelled_ms_[sj.id] = now;
            note(jobs_->EndExternalGang(g.job_id, g.attempt, ExternalEnd::kFatal,
                                        fmt::format("Slurm cannot run it (job {}): {}", sj.id,
                                                    slurm::PendingReasonText(sj.reason))));
            continue;
          }
        }
        const std::string why =
            pending ? fmt::format("waiting in Slurm's queue as job {}: {}", sj.id, slurm::PendingReasonText(sj.reason))
                    : fmt::format("starting in Slurm job {} on {}", sj.id, sj.nodes);
        // Most rounds say what the job already says: no store call then.
        if (why != g.reason) note(jobs_->NoteExternalReason(g.job_id, g.attempt, why));
      }
      continue;
    }
    // Ended in Slurm: its steps' last reports may still be on their way.
    auto [seen, fresh] = ended_seen_ms_.emplace(sj.id, now);
    if (now - seen->second < options_.report_grace_ms && g.bound) continue;
    auto [how, why] = EndFor(sj, g.stopping);
    note(jobs_->EndExternalGang(g.job_id, g.attempt, how, why));
  }

  // Submissions go out on a few threads: sbatch is one round trip each. A
  // Slurm that does not answer ends the round's submissions (the next round
  // tries again), and so does a stop: a round never holds the server up.
  if (!to_submit.empty()) {
    const size_t threads = std::max<size_t>(1, std::min<size_t>(options_.submit_threads, to_submit.size()));
    std::vector<std::future<void>> running;
    std::atomic<size_t> next{0};
    std::atomic<bool> halt{false};
    for (size_t t = 0; t < threads; ++t) {
      running.push_back(std::async(std::launch::async, [&] {
        for (size_t i = next++; i < to_submit.size() && !halt && !Stopping(); i = next++) {
          Status st = Submit(*to_submit[i]);
          if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded) halt = true;
          note(st);
        }
      }));
    }
    for (auto& f : running) f.get();
  }

  // Slurm jobs of ours that no live gang owns (a job that ended, an attempt
  // replaced while the server was away): Slurm ends them.
  // A gang that just ended still has its Slurm job while its steps exit: only
  // one that has no gang for stop_deadline_ms is cancelled.
  for (const auto& sj : slurm_jobs) {
    int64_t job_id = 0;
    int attempt = 0;
    if (slurm::EndOf(sj.state) != slurm::EndKind::kNotEnded || cancelled_ms_.count(sj.id)) continue;
    if (!ParseSlurmJobName(sj.name, options_.site, &job_id, &attempt) || live.count({job_id, attempt})) continue;
    auto [since, fresh] = orphan_seen_ms_.emplace(sj.id, now);
    if (now - since->second < options_.stop_deadline_ms) continue;
    spdlog::info("slurm: cancelling job {} ({}): no Ringmaster job runs as it", sj.id, sj.name);
    if (client_->Cancel(sj.id).ok()) cancelled_ms_[sj.id] = now;
  }
  // What Slurm no longer lists needs no memory of it.
  std::set<int64_t> listed;
  for (const auto& sj : slurm_jobs) listed.insert(sj.id);
  std::erase_if(ended_seen_ms_, [&](const auto& e) { return !listed.count(e.first); });
  std::erase_if(cancelled_ms_, [&](const auto& e) { return !listed.count(e.first); });
  std::erase_if(orphan_seen_ms_, [&](const auto& e) { return !listed.count(e.first); });
  std::erase_if(never_seen_ms_, [&](const auto& e) { return !listed.count(e.first); });

  if (now - forgot_ms_ >= kForgetIntervalMs) {
    forgot_ms_ = now;
    RM_RETURN_IF_ERROR(ForgetStepNodes(live));
  }
  return Status::Ok();
}

Status SlurmBackend::Submit(const ExternalGang& g) {
  const int64_t now = clock_->NowMs();
  std::vector<std::string> tokens;
  std::vector<int64_t> token_ids;
  auto drop_tokens = [&] {
    for (int64_t id : token_ids) (void)store_->DeleteToken(id);
  };
  for (int rank = 0; rank < g.replicas; ++rank) {
    const std::string node = JobService::StepNodeName(g.job_id, g.attempt, rank);
    const std::string secret = NewApiToken();
    store::Token t{0, agent_user_id_, std::string(kTokenPrefix) + node, Sha256Hex(secret), now, "agent", node};
    t.expires_ms = now + kTokenLifeMs;
    auto id = store_->CreateToken(t);
    if (!id.ok()) {
      drop_tokens();
      return id.status();
    }
    token_ids.push_back(*id);
    tokens.push_back(secret);
  }
  auto id = client_->Submit(SlurmRequest(g, options_, tokens));
  if (!id.ok()) {
    const Status& st = id.status();
    // Past its deadline sbatch may still have queued the job: its tokens stay
    // (the next round finds it by name; they go once the attempt is over).
    if (st.code() != StatusCode::kDeadlineExceeded) drop_tokens();
    // A submit limit of Slurm's (per user, QOS, association) is a wait, not the job's fault.
    const bool limit = st.message().find("submit limit") != std::string::npos ||
                       st.message().find("accounting/QOS policy") != std::string::npos;
    if (st.code() == StatusCode::kInvalidArgument && !limit) {
      RM_RETURN_IF_ERROR(jobs_->EndExternalGang(g.job_id, g.attempt, ExternalEnd::kFatal,
                                                "Slurm refused it: " + st.message()));
      return Status::Ok();
    }
    RM_RETURN_IF_ERROR(jobs_->NoteExternalReason(
        g.job_id, g.attempt,
        (limit ? "waiting for room under Slurm's limits: " : "waiting for Slurm, which did not answer: ") +
            st.message()));
    return limit ? Status::Ok() : st;
  }
  spdlog::info("slurm: job {} attempt {} submitted as Slurm job {}", g.job_id, g.attempt, *id);
  return jobs_->NoteExternalReason(g.job_id, g.attempt, fmt::format("handed to Slurm as job {}", *id));
}

Status SlurmBackend::ForgetStepNodes(const std::set<std::pair<int64_t, int>>& live) {
  auto dead = [&](const std::string& node) {
    int64_t job_id = 0;
    int attempt = 0, rank = 0;
    return JobService::ParseStepNodeName(node, &job_id, &attempt, &rank) && !live.count({job_id, attempt});
  };
  RM_ASSIGN_OR_RETURN(auto nodes, store_->ListNodes());
  for (const store::Node& n : nodes) {
    if (!dead(n.name)) continue;
    // Refused while its step still talks to the server: the next round.
    if (Status st = jobs_->DeleteNode(n.name, true); !st.ok() && st.code() != StatusCode::kFailedPrecondition) {
      spdlog::warn("slurm: forgetting step node {}: {}", n.name, st.ToString());
    }
  }
  if (agent_user_id_ == 0) return Status::Ok();
  RM_ASSIGN_OR_RETURN(auto tokens, store_->ListTokens(agent_user_id_));
  for (const store::Token& t : tokens) {
    if (t.scope == "agent" && t.name.rfind(kTokenPrefix, 0) == 0 && dead(t.node)) {
      RM_RETURN_IF_ERROR(store_->DeleteToken(t.id));
    }
  }
  return Status::Ok();
}

}  // namespace ringmaster::server
