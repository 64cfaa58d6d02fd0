// Running a tool (iproute2, ovs-vsctl, runc, sbatch) to its end and reading
// what it printed: argv exec'd directly (no shell), stdin from /dev/null, a
// deadline. Thread-safe.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster {

// How a tool ended and what it printed (each stream: at most 1 MiB kept).
struct ToolOutput {
  int wait_status = 0;  // waitpid's
  std::string out, err;
  bool exited_ok() const;  // exited with status 0
};

// Runs argv[0] (looked up on PATH) to its end within `timeout` (then
// SIGKILL) and returns how it ended, whatever its exit status, for callers
// that tell its failures apart by what it printed. DeadlineExceeded on the
// deadline; Internal when it could not be started.
StatusOr<ToolOutput> CaptureTool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

// Runs argv[0] (looked up on PATH) to its end within `timeout` (then
// SIGKILL); its stdout (at most 1 MiB kept), or an error that quotes its
// stderr: NotFound when the tool is not installed, DeadlineExceeded, Internal.
StatusOr<std::string> RunTool(const std::vector<std::string>& argv,
                              std::chrono::milliseconds timeout = std::chrono::seconds(20));

}  // namespace ringmaster
