// The pure text helpers of slurm.h: sbatch's options, the batch script,
// pending reasons in words, end states.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "slurm/slurm.h"

namespace ringmaster::slurm {
namespace {

bool HasLineBreak(std::string_view s) { return s.find_first_of(std::string_view("\n\r\0", 3)) != s.npos; }

bool IsEnvName(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// Characters that never need quoting in a POSIX shell word, wherever it
// stands ('=' would make a leading word an assignment, '~' a home directory).
bool IsShellSafe(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("@%+:,./_-").find(c) != std::string_view::npos;
  });
}

constexpr std::string_view kReqNodeNotAvailText = "waiting: a node it needs is not available (down, drained or reserved)";

struct ReasonText {
  std::string_view code, text;
};

// Slurm's reason codes (squeue(1), "JOB REASON CODES") a user meets most.
constexpr ReasonText kReasons[] = {
    {"Resources", "waiting for resources: the nodes that could run it are busy"},
    {"Priority", "waiting behind jobs of higher priority in Slurm's queue"},
    {"ReqNodeNotAvail", kReqNodeNotAvailText},
    {"QOSMaxGRESPerUser", "waiting: the user has as many GPUs as the Slurm QOS allows running"},
    {"QOSMaxJobsPerUserLimit", "waiting: the user has as many jobs as the Slurm QOS allows running"},
    {"QOSMaxCpuPerUserLimit", "waiting: the user has as many CPUs as the Slurm QOS allows running"},
    {"QOSGrpGRES", "waiting: the Slurm QOS's GPUs are all in use"},
    {"AssocGrpGRES", "waiting: the Slurm account's GPUs are all in use"},
    {"AssocGrpCpuLimit", "waiting: the Slurm account's CPUs are all in use"},
    {"AssocMaxJobsLimit", "waiting: the Slurm account has as many jobs running as it may"},
    {"AssocGrpJobsLimit", "waiting: the Slurm account's group has as many jobs running as it may"},
    {"Dependency", "waiting for the jobs it depends on to end"},
    {"DependencyNeverSatisfied", "will never start: a job it depends on failed"},
    {"BeginTime", "waiting for its start time"},
    {"PartitionTimeLimit", "will not start: its time limit is above the Slurm partition's"},
    {"PartitionNodeLimit", "will not start: it needs more nodes than the Slurm partition allows"},
    {"PartitionDown", "waiting: the Slurm partition is down"},
    {"PartitionInactive", "waiting: the Slurm partition is inactive"},
    {"JobHeldUser", "held by its user in Slurm (scontrol release)"},
    {"JobHeldAdmin", "held by a Slurm administrator"},
    {"NodeDown", "waiting: a node it needs is down"},
    {"BadConstraints", "will not start: no node has the resources or features it asks for"},
    {"Licenses", "waiting for licenses"},
    {"Reservation", "waiting for its Slurm reservation to start"},
    {"launch failed requeued held", "held by Slurm after its launch failed"},
    {"JobLaunchFailure", "Slurm could not launch it"},
    {"ReqNodeNotAvail, Reserved for maintenance", "waiting: its nodes are reserved for maintenance"},
    {"Cleaning", "waiting for Slurm to clean up its previous run"},
    {"InvalidQOS", "will not start: its Slurm QOS is not valid"},
    {"InvalidAccount", "will not start: its Slurm account is not valid"},
    {"PartitionConfig", "will not start: its request does not fit the Slurm partition's configuration"},
};

int64_t MemoryPerCpuMib(const SubmitRequest& r) {
  const int64_t cpus = std::max(1, r.cpus_per_task);
  return std::max<int64_t>(1, (r.memory_mib_per_task + cpus - 1) / cpus);
}

}  // namespace

Status CheckRequest(const SubmitRequest& r) {
  if (r.name.empty()) return InvalidArgument("a Slurm job needs a name");
  if (r.ntasks < 1 || r.cpus_per_task < 1 || r.memory_mib_per_task < 1 || r.gpus_per_task < 0) {
    return InvalidArgument(fmt::format("a Slurm job needs at least 1 task, 1 CPU and 1 MiB per task (got {} x {} CPUs, {} MiB, {} GPUs)",
                                       r.ntasks, r.cpus_per_task, r.memory_mib_per_task, r.gpus_per_task));
  }
  if (r.step_argv.empty()) return InvalidArgument("a Slurm job needs a step to run");
  // A GRES type is one word: "a100", "h100_80gb", "rtx-8000".
  if (!std::all_of(r.gpu_type.begin(), r.gpu_type.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
      })) {
    return InvalidArgument(fmt::format("{:?} is not a GPU type Slurm knows (a GRES type is one word)", r.gpu_type));
  }
  for (std::string_view field : {std::string_view(r.name), std::string_view(r.comment), std::string_view(r.gpu_type),
                                 std::string_view(r.partition), std::string_view(r.account), std::string_view(r.qos),
                                 std::string_view(r.work_dir), std::string_view(r.output)}) {
    if (HasLineBreak(field)) return InvalidArgument(fmt::format("a Slurm job's option has a line break: {:?}", field));
  }
  for (const auto& a : r.step_argv) {
    if (HasLineBreak(a)) return InvalidArgument(fmt::format("the Slurm step's argument {:?} has a line break", a));
  }
  for (const auto& [k, v] : r.env) {
    if (!IsEnvName(k)) return InvalidArgument(fmt::format("{:?} is not an environment variable's name", k));
    if (HasLineBreak(v)) return InvalidArgument(fmt::format("the environment variable {} has a line break", k));
  }
  return Status::Ok();
}

std::string ShellQuote(std::string_view word) {
  if (IsShellSafe(word)) return std::string(word);
  std::string q = "'";
  for (char c : word) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

std::vector<std::string> SbatchArgs(const SubmitRequest& r) {
  std::vector<std::string> a;
  a.push_back("--job-name=" + r.name);
  if (!r.comment.empty()) a.push_back("--comment=" + r.comment);
  a.push_back(fmt::format("--ntasks={}", r.ntasks));
  a.push_back(fmt::format("--cpus-per-task={}", r.cpus_per_task));
  a.push_back(fmt::format("--mem-per-cpu={}M", MemoryPerCpuMib(r)));
  if (r.gpus_per_task > 0) {
    a.push_back(r.gpu_type.empty() ? fmt::format("--gpus-per-task={}", r.gpus_per_task)
                                   : fmt::format("--gpus-per-task={}:{}", r.gpu_type, r.gpus_per_task));
  }
  if (r.time_limit_minutes > 0) a.push_back(fmt::format("--time={}", r.time_limit_minutes));
  if (!r.partition.empty()) a.push_back("--partition=" + r.partition);
  if (!r.account.empty()) a.push_back("--account=" + r.account);
  if (!r.qos.empty()) a.push_back("--qos=" + r.qos);
  a.push_back("--no-requeue");
  a.push_back("--export=NONE");
  a.push_back("--chdir=" + (r.work_dir.empty() ? std::string("/") : r.work_dir));
  a.push_back("--output=" + (r.output.empty() ? std::string("/dev/null") : r.output));
  return a;
}

std::string BatchScript(const SubmitRequest& r) {
  std::string s = "#!/bin/sh\n";
  for (const auto& [k, v] : r.env) s += fmt::format("export {}={}\n", k, ShellQuote(v));
  if (r.ntasks == 1) {
    // One rank: the batch step is its step (rank 0, the job's GPUs, its CPUs);
    // an srun step would cost a launch more (0.2 s on the test Slurm).
    s += "exec";
  } else {
    // --cpus-per-task again: srun 22.05 no longer takes it from the allocation.
    s += fmt::format("exec srun --kill-on-bad-exit=0 --export=ALL --cpus-per-task={}", r.cpus_per_task);
  }
  for (const auto& a : r.step_argv) s += " " + ShellQuote(a);
  return s + "\n";
}

std::string PendingReasonText(std::string_view reason) {
  if (reason.empty()) return "";
  if (reason == "None") return "Slurm gives no reason";
  for (const auto& r : kReasons) {
    if (reason == r.code) return std::string(r.text);
  }
  // "ReqNodeNotAvail, UnavailableNodes:n1,n2": the nodes it waits for.
  if (reason.starts_with("ReqNodeNotAvail")) {
    std::string text(kReqNodeNotAvailText);
    if (auto p = reason.find("UnavailableNodes:"); p != reason.npos) {
      std::string_view nodes = reason.substr(p + std::string_view("UnavailableNodes:").size());
      if (!nodes.empty()) text += fmt::format(" (unavailable: {})", nodes);
    }
    return text;
  }
  if (reason.starts_with("launch failed")) return "held by Slurm after its launch failed";
  return fmt::format("Slurm says: {}", reason);
}

bool NeverStarts(std::string_view reason) {
  for (const auto& r : kReasons) {
    if (reason == r.code) return std::string_view(r.text).starts_with("will not start");
  }
  return false;
}

EndKind EndOf(std::string_view state) {
  // "CANCELLED by 0": scontrol adds who cancelled it.
  state = state.substr(0, state.find(' '));
  if (state == "COMPLETED") return EndKind::kCompleted;
  if (state == "FAILED") return EndKind::kFailed;
  if (state == "CANCELLED") return EndKind::kCancelled;
  if (state == "TIMEOUT") return EndKind::kTimeout;
  if (state == "NODE_FAIL" || state == "BOOT_FAIL" || state == "PREEMPTED") return EndKind::kNodeFail;
  if (state == "OUT_OF_MEMORY") return EndKind::kOutOfMemory;
  if (state == "DEADLINE") return EndKind::kDeadline;
  // Also REVOKED (a federation sibling ran it) and SPECIAL_EXIT: neither ends
  // a job here, Slurm still holds or requeues it.
  return EndKind::kNotEnded;
}

}  // namespace ringmaster::slurm
