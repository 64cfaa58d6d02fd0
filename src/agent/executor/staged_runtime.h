// The product's own tools, staged where every task's user can run them. The
// agent may run from a directory task users cannot enter (a checkout in
// /root), so, as Tekton copies its entrypoint into a shared volume, it
// copies the tools it finds next to its binary (ringmaster-train, and the
// ringmaster_torch Python package) into a root-owned, world-readable
// directory that tasks get first on PATH and PYTHONPATH. Thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::agent {

struct StagedRuntime {
  std::string bin_dir;                 // "" when there was no tool to stage
  std::string python_dir;              // "" when there was no package to stage
  std::vector<std::string> staged;     // what was found, for the start-up log
};

// Stages what lies next to `self_exe` (the ringmaster binary) into `dest`:
// in a build tree <exe_dir>/../train/ringmaster-train and
// <exe_dir>/../../python/ringmaster_torch; in an install, alongside
// (<exe_dir>/ringmaster-train, <exe_dir>/../lib/ringmaster/python/ringmaster_torch).
// Files are replaced one by one through a rename, so a running task keeps the
// copy it started with; unchanged files (same size and mtime) are not copied again.
// `dest` must be a directory only root (or this process's user) may write.
StatusOr<StagedRuntime> StageRuntime(const std::string& self_exe, const std::string& dest);

}  // namespace ringmaster::agent
