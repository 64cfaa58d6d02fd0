// Logging: spdlog, one process-wide logger writing to stderr; and a crash
// reporter, so a process that dies leaves its cause in the log.
#pragma once

#include <spdlog/spdlog.h>

namespace ringmaster {
void InitLogging(bool verbose);

// On SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT: writes the signal and a
// backtrace to stderr (async-signal-safe), then dies of the same signal. An
// exception that escapes a thread is logged with its text before the abort.
// Call once, early in main.
void InstallCrashHandler();
}  // namespace ringmaster
