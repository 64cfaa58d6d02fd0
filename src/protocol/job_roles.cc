#include "protocol/job_roles.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace ringmaster::protocol {
namespace {

bool IsTensorFlowRole(const std::string& r) { return r == "chief" || r == "ps" || r == "evaluator"; }
bool IsMxnetRole(const std::string& r) { return r == "scheduler" || r == "server"; }

}  // namespace

const std::vector<std::string>& RoleOrder() {
  static const std::vector<std::string> order = {"chief", "scheduler", "ps", "server", "worker", "evaluator"};
  return order;
}

std::string RolesFramework(const std::vector<JobRole>& roles) {
  for (const JobRole& r : roles) {
    if (IsTensorFlowRole(r.name)) return "tensorflow";
    if (IsMxnetRole(r.name)) return "mxnet";
  }
  return "";
}

StatusOr<std::vector<JobRole>> CheckRoles(std::vector<JobRole> roles) {
  std::map<std::string, int> count;
  for (const JobRole& r : roles) {
    if (std::find(RoleOrder().begin(), RoleOrder().end(), r.name) == RoleOrder().end()) {
      return InvalidArgument(fmt::format(
          "replicas.{}: not a role (TensorFlow's are chief, worker, ps and evaluator, MXNet's scheduler, server and "
          "worker; an elastic job gives min and max)", r.name));
    }
    if (r.count < 1) return InvalidArgument(fmt::format("replicas.{}: must be at least 1, got {}", r.name, r.count));
    count[r.name] = r.count;
  }
  const std::string* tf = nullptr;
  const std::string* mx = nullptr;
  for (const JobRole& r : roles) {
    if (IsTensorFlowRole(r.name) && !tf) tf = &r.name;
    if (IsMxnetRole(r.name) && !mx) mx = &r.name;
  }
  if (tf && mx) {
    return InvalidArgument(fmt::format("replicas.{}: an MXNet role does not mix with TensorFlow's {} (one framework "
                                       "per job)", *mx, *tf));
  }
  for (const char* one : {"chief", "evaluator", "scheduler"}) {
    if (count.count(one) && count[one] > 1) {
      return InvalidArgument(fmt::format("replicas.{}: a job has at most 1 {}, got {}", one, one, count[one]));
    }
  }
  if (mx) {
    if (!count.count("scheduler")) {
      return InvalidArgument("replicas.scheduler: required for MXNet (ps-lite): e.g. replicas: {scheduler: 1, "
                             "server: 1, worker: 2}");
    }
    if (!count.count("server")) {
      return InvalidArgument("replicas.server: MXNet's distributed kvstore needs at least 1 server");
    }
    if (!count.count("worker")) return InvalidArgument("replicas.worker: MXNet needs at least 1 worker");
  } else if (!count.count("chief") && !count.count("worker")) {
    return InvalidArgument("replicas.worker: required: a job needs a chief or at least 1 worker to train");
  }
  if (count.count("ps") && !count.count("worker")) {
    return InvalidArgument("replicas.worker: TensorFlow's parameter servers need at least 1 worker");
  }
  std::sort(roles.begin(), roles.end(), [](const JobRole& a, const JobRole& b) {
    auto pos = [](const std::string& n) { return std::find(RoleOrder().begin(), RoleOrder().end(), n); };
    return pos(a.name) < pos(b.name);
  });
  return roles;
}

TaskRole RoleOfRank(const std::vector<JobRole>& roles, int rank) {
  int first = 0;
  for (const JobRole& r : roles) {
    if (rank < first + r.count) return {r.name, rank - first};
    first += r.count;
  }
  return {"worker", rank - first};  // plain replicas: N (or a rank past the roles: a worker)
}

std::string DecidingRole(const std::vector<JobRole>& roles) {
  for (const JobRole& r : roles) {
    if (r.name == "chief") return "chief";
  }
  return "worker";
}

std::string RolesDone(const std::vector<JobRole>& roles, const std::vector<RankEnd>& tasks) {
  if (roles.empty()) return "";
  const std::string deciding = DecidingRole(roles);
  int done = 0, deciders = 0;
  bool others_running = false;
  for (const RankEnd& t : tasks) {
    if (RoleOfRank(roles, t.rank).name != deciding) {
      others_running |= !t.ended;
      continue;
    }
    ++deciders;
    done += t.succeeded;
  }
  if (deciders == 0 || done < deciders || !others_running) return "";
  return deciding == "chief" ? std::string("the chief succeeded") : fmt::format("all {} workers succeeded", deciders);
}

}  // namespace ringmaster::protocol
