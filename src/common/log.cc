#include "common/log.h"

#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>

#include <spdlog/pattern_formatter.h>

#include "common/json_limits.h"

namespace ringmaster {

namespace {

class EscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string text = EscapeControl(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<EscapedMessage>(); }
};

}  // namespace

std::unique_ptr<spdlog::formatter> EscapingFormatter(const std::string& pattern, spdlog::pattern_time_type time) {
  auto f = std::make_unique<spdlog::pattern_formatter>(time);
  f->add_flag<EscapedMessage>('v').set_pattern(pattern);
  return f;
}

void InitLogging(bool verbose) {
  spdlog::set_formatter(EscapingFormatter("%Y-%m-%dT%H:%M:%S.%e %^%L%$ %v"));
  spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::info);
}

namespace {

void WriteStr(const char* s) { (void)!write(STDERR_FILENO, s, strlen(s)); }

void OnFatalSignal(int sig) {
  WriteStr("ringmaster: fatal signal ");
  const char* name = sigabbrev_np(sig);
  WriteStr(name ? name : "?");
  WriteStr(" (");
  WriteStr(sigdescr_np(sig) ? sigdescr_np(sig) : "");
  WriteStr("); backtrace:\n");
  void* frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(sig, SIG_DFL);  // SA_RESETHAND did this already; be sure
  raise(sig);
}

}  // namespace

void InstallCrashHandler() {
  // An alternate stack, so that even a stack overflow on the main thread is reported.
  static char alt_stack[64 << 10];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  sigaltstack(&ss, nullptr);
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc now, not inside the handler
  struct sigaction sa {};
  sa.sa_handler = OnFatalSignal;
  sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
  std::set_terminate([] {
    if (auto e = std::current_exception()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        spdlog::critical("uncaught exception: {}", x.what());
      } catch (...) {
        spdlog::critical("uncaught exception of an unknown type");
      }
    } else {
      spdlog::critical("std::terminate called");
    }
    std::abort();
  });
}

}  // namespace ringmaster
