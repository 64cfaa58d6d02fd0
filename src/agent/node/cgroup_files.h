// Reading and writing cgroup interface files, shared by the v1 and v2
// backends (cgroups_v1.cc, cgroups_v2.cc): one write(2) per value, as the
// kernel parses each write on its own, and errno kept in the error so a
// caller can tell EBUSY from EINVAL. Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::agent {

// One write of `value` to `file`; the error names both and keeps errno in
// `*err` when given.
Status WriteCgroupFile(const std::string& file, const std::string& value, int* err = nullptr);
// The file's first integer; nullopt when it cannot be read.
std::optional<int64_t> ReadCgroupInt(const std::string& file);
// A "key value" line of a flat-keyed file (cpu.stat, memory.events,
// memory.stat, memory.oom_control); 0 when absent.
int64_t ReadCgroupStat(const std::string& file, const std::string& key);
// The pids listed in a cgroup.procs file (empty when unreadable).
std::vector<pid_t> ReadCgroupProcs(const std::string& file);
// The subdirectories of `dir`, as full paths.
std::vector<std::string> CgroupChildren(const std::string& dir);
// Kills every process in `dir` and below and removes the directories,
// deepest first (v2's cgroup.kill where the kernel has it, else SIGKILL to
// each pid listed). A cgroup whose last process is still exiting refuses
// rmdir (EBUSY) for a moment: retried for up to 2 s.
void KillAndRemoveCgroup(const std::string& dir);

}  // namespace ringmaster::agent
