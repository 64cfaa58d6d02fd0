// Roles within a distributed job (`replicas: {chief: 1, ps: 1, worker: 2}`),
// as Kubeflow's TFJob and MXJob name them: TensorFlow's chief, worker, ps and
// evaluator, MXNet's scheduler, server and worker. Every task runs the job's
// command and learns its role from its environment (docs/jobspec.md).
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::protocol {

struct JobRole {
  std::string name;
  int count = 0;
  bool operator==(const JobRole&) const = default;
};

// Roles take ranks in this order: {chief: 1, ps: 1, worker: 2} is rank 0 the
// chief, rank 1 the ps, ranks 2 and 3 the workers. The coordinators come
// first, so rank 0 is the one a framework expects to lead.
const std::vector<std::string>& RoleOrder();

// "tensorflow" (chief, ps, evaluator), "mxnet" (scheduler, server) or "" (workers only).
std::string RolesFramework(const std::vector<JobRole>& roles);

// Checks a role list read from a spec (in any order) and puts it in
// RoleOrder(). Errors name the field: "replicas.chief: at most 1 ...".
StatusOr<std::vector<JobRole>> CheckRoles(std::vector<JobRole> roles);

struct TaskRole {
  std::string name = "worker";
  int index = 0;  // within its role
};
// The role of rank `rank` in a job with `roles` (empty: every rank a worker).
TaskRole RoleOfRank(const std::vector<JobRole>& roles, int rank);

// The role whose end ends the job: the chief where there is one, else the
// workers. When all its tasks have succeeded the others (ps, servers, the
// scheduler, an evaluator) have nothing left to serve and are stopped.
std::string DecidingRole(const std::vector<JobRole>& roles);

// A task as the success rule sees it.
struct RankEnd {
  int rank = 0;
  bool ended = false;      // in a terminal state
  bool succeeded = false;  // exited 0
};
// Why a job with roles is done while tasks of its other roles still serve
// ("the chief succeeded", "all 2 workers succeeded"), or "" if it is not: its
// deciding role has not all succeeded, or nothing else is left running.
std::string RolesDone(const std::vector<JobRole>& roles, const std::vector<RankEnd>& tasks);

}  // namespace ringmaster::protocol
