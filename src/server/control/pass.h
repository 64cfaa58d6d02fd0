// One scheduling pass of JobService, in steps: read the store and build the
// snapshot (snapshot.h), schedule (scheduler/), apply the plan (one store
// transaction per gang), autoscale, preempt. JobService::RunPass and its
// steps are defined in pass.cc and apply.cc; all run under JobService's lock.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "scheduler/scheduler.h"
#include "store/meta_store.h"

namespace ringmaster::server {

// What a pass read from the store, and the scheduler's input built from it.
struct PassInput {
  int64_t now_ms = 0;
  std::vector<store::Node> nodes;
  std::vector<store::Task> placed;
  std::vector<store::Job> active;
  std::vector<store::Job> pending;  // those the queue holds, by_id points into it
  std::map<int64_t, std::string> node_names;
  scheduler::Snapshot snap;
  std::vector<scheduler::JobRequest> queue;
  std::map<int64_t, store::Job*> by_id;
};

}  // namespace ringmaster::server
