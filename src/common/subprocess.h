// Running a tool (iproute2, ovs-vsctl, runc) to its end and reading what it
// printed: argv exec'd directly (no shell), stdin from /dev/null, a deadline.
// Thread-safe.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster {

// Runs argv[0] (looked up on PATH) to its end within `timeout` (then
// SIGKILL); its stdout (at most 1 MiB kept), or an error that quotes its
// stderr: NotFound when the tool is not installed, DeadlineExceeded, Internal.
StatusOr<std::string> RunTool(const std::vector<std::string>& argv,
                              std::chrono::milliseconds timeout = std::chrono::seconds(20));

}  // namespace ringmaster
