// Clock: the one seam for reading time, so the scheduler, the job state
// machine and lease checks are tested with a FakeClock that moves only when
// told. Times are milliseconds since the Unix epoch. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace ringmaster {

// NowMs is the wall clock: what times are shown and stored as. It can jump
// (an operator, NTP stepping it). SteadyMs is monotonic, from an arbitrary
// origin, and never jumps: every duration the server acts on (leases,
// restart backoff, time limits) is measured with it while the process runs.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMs() const = 0;
  virtual int64_t SteadyMs() const = 0;
};

class RealClock final : public Clock {
 public:
  int64_t NowMs() const override;
  int64_t SteadyMs() const override;
  static RealClock* Get();
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ms = 1'700'000'000'000) : now_(start_ms) {}
  int64_t NowMs() const override { return now_.load(); }
  int64_t SteadyMs() const override { return steady_.load(); }
  // Time passes: both clocks move.
  void AdvanceMs(int64_t ms) {
    now_ += ms;
    steady_ += ms;
  }
  // The wall clock is set (forward or back); no time passes.
  void JumpWallMs(int64_t ms) { now_ += ms; }

 private:
  std::atomic<int64_t> now_;
  std::atomic<int64_t> steady_{1'000'000};
};

// "2026-12-02T15:03:50.123Z"; empty for 0 (never).
std::string FormatTimeUtc(int64_t ms);
// "3s", "4m12s", "2h5m", "3d4h".
std::string FormatDuration(int64_t ms);

}  // namespace ringmaster
