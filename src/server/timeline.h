// A job's timeline: where its time went (queued, staging inputs, pulling
// the image, starting, running, writing checkpoints, uploading outputs),
// derived from its stored events alone, so it survives restarts of the
// server and needs no state of its own. Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/meta_store.h"

namespace ringmaster::server {

struct TimelinePhase {
  std::string phase;  // queued, staging, pulling, starting, running, checkpoint, uploading
  int rank = -1;      // -1: the job's (queued)
  int attempt = 0;    // the task's placement it belongs to (queued: the one it waits for)
  int64_t start_ms = 0;
  std::optional<int64_t> end_ms;  // unset while it lasts
};

// The phases agents report on a task (POST /api/v1/agent/tasks/{id}/status
// with "phase"), in the order they happen.
bool IsAgentPhase(std::string_view phase);
// The reason of the task event that records `phase` ("phase: staging"), and
// of the one that ends a checkpoint (its checkpoints/latest written).
std::string PhaseEventReason(std::string_view phase);
extern const char kCheckpointWritten[];

// The timeline of the job whose events (oldest first) these are.
std::vector<TimelinePhase> BuildTimeline(const std::vector<store::Event>& events);

}  // namespace ringmaster::server
