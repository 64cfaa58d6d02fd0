// Logging: spdlog, one process-wide logger writing to stderr, whose lines
// never carry a control character (text a client sent cannot forge a line or
// send a terminal escapes); and a crash reporter, so a process that dies
// leaves its cause in the log.
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace ringmaster {
void InitLogging(bool verbose);

// A formatter for `pattern` whose %v is the message with control characters
// escaped (EscapeControl), for every logger of the process.
std::unique_ptr<spdlog::formatter> EscapingFormatter(const std::string& pattern,
                                                     spdlog::pattern_time_type time = spdlog::pattern_time_type::local);

// On SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT: writes the signal and a
// backtrace to stderr (async-signal-safe), then dies of the same signal. An
// exception that escapes a thread is logged with its text before the abort.
// Call once, early in main.
void InstallCrashHandler();
}  // namespace ringmaster
