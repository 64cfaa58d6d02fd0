// The job and task state machine (PENDING -> SCHEDULED -> RUNNING ->
// SUCCEEDED | FAILED | CANCELLED, every transition an event): JobService's
// SetJobState, SetTaskState, SettleJobLocked and ResizeLocked are defined in
// state_machine.cc. Called under JobService's lock, inside a store transaction.
#pragma once

#include <string>

#include "protocol/job_spec.h"
#include "store/meta_store.h"

namespace ringmaster::server {

// A new, unplaced task of a job with `spec`'s per-task resources.
store::Task PendingTask(const protocol::JobSpec& spec, const std::string& reason, int64_t now);

}  // namespace ringmaster::server
