#include "server/timeline.h"

#include <map>

namespace ringmaster::server {
namespace {

constexpr std::string_view kPhasePrefix = "phase: ";
constexpr size_t kNone = static_cast<size_t>(-1);

bool IsTerminalName(const std::string& state) {
  auto s = store::ParseState(state);
  return s && store::IsTerminal(*s);
}

}  // namespace

const char kCheckpointWritten[] = "phase: checkpoint written";

bool IsAgentPhase(std::string_view phase) {
  return phase == "staging" || phase == "pulling" || phase == "starting" || phase == "uploading";
}

std::string PhaseEventReason(std::string_view phase) { return std::string(kPhasePrefix) + std::string(phase); }

std::vector<TimelinePhase> BuildTimeline(const std::vector<store::Event>& events) {
  std::vector<TimelinePhase> out;
  // What is open per rank: one phase of its sequence (staging .. uploading)
  // and, beside it, a checkpoint being written.
  struct Open {
    int attempt = 0;
    size_t seq = kNone;
    size_t checkpoint = kNone;
  };
  std::map<int, Open> ranks;
  size_t queued = kNone;
  int waits = 0;
  const auto close = [&out](size_t& i, int64_t at) {
    if (i != kNone && !out[i].end_ms) out[i].end_ms = at;
    i = kNone;
  };
  const auto open = [&out](size_t& i, std::string phase, int rank, int attempt, int64_t at) {
    out.push_back({std::move(phase), rank, attempt, at, std::nullopt});
    i = out.size() - 1;
  };
  for (const store::Event& e : events) {
    const bool moved = e.from_state != e.to_state;
    if (e.task_id == 0) {
      // Submitted, or back in the queue to restart: waits for its next placement.
      if (moved && e.to_state == "PENDING" && queued == kNone) open(queued, "queued", -1, ++waits, e.ts_ms);
      if (moved && IsTerminalName(e.to_state)) {
        close(queued, e.ts_ms);
        for (auto& [rank, o] : ranks) {
          close(o.seq, e.ts_ms);
          close(o.checkpoint, e.ts_ms);
        }
      }
      continue;
    }
    Open& o = ranks[e.rank];
    if (moved && e.to_state == "SCHEDULED") {  // placed: a new attempt
      close(o.seq, e.ts_ms);
      close(o.checkpoint, e.ts_ms);
      ++o.attempt;
      close(queued, e.ts_ms);
    } else if (moved && e.to_state == "RUNNING") {
      close(o.seq, e.ts_ms);
      open(o.seq, "running", e.rank, o.attempt, e.ts_ms);
    } else if (e.reason == kCheckpointWritten) {
      close(o.checkpoint, e.ts_ms);
    } else if (e.reason.starts_with(kPhasePrefix)) {
      const std::string phase = e.reason.substr(kPhasePrefix.size());
      if (phase == "checkpoint") {
        if (o.checkpoint == kNone) open(o.checkpoint, phase, e.rank, o.attempt, e.ts_ms);
      } else if (IsAgentPhase(phase)) {
        close(o.seq, e.ts_ms);
        open(o.seq, phase, e.rank, o.attempt, e.ts_ms);
      }
    }
    if (moved && (IsTerminalName(e.to_state) || e.to_state == "PENDING")) {
      close(o.seq, e.ts_ms);
      close(o.checkpoint, e.ts_ms);
    }
  }
  return out;
}

}  // namespace ringmaster::server
