// SeriesStore: the server's embedded time series. Each series (a key such as
// "node/3/cpu" or "task/17/memory_bytes") keeps three rings: raw points at
// the sampling resolution (1 s), and averages (with maxima) over 10 s and
// 1 min, each ring bounded, so memory is bounded by the number of series and
// never grows with time. The coarse rings (10 s and 1 min) are what Save
// writes and Load reads back: history survives a restart, the last minutes
// of raw points do not. Thread-safe: one mutex; queries copy out.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::monitor {

struct TierSpec {
  int64_t resolution_ms = 1000;
  int points = 300;  // how many the ring keeps
};

struct SeriesStoreOptions {
  // Finest first; each coarser tier's resolution a multiple of the one before.
  std::vector<TierSpec> tiers = {{1'000, 300}, {10'000, 360}, {60'000, 1'440}};  // 5 min, 1 h, 24 h
  // Series beyond this are refused (counted in dropped()): a flood of keys
  // cannot grow the server without bound. Those whose key starts with
  // capped_prefix (tasks', which users make) may take only max_capped_series
  // of them, so the nodes' series always have room.
  size_t max_series = 250'000;
  std::string capped_prefix = "task/";
  size_t max_capped_series = 200'000;
  // A sample this far before what a series holds is not a late one but the
  // server's clock set back: the series starts afresh from it.
  int64_t clock_reset_ms = 150'000;
};

struct Point {
  int64_t t_ms = 0;  // the start of its interval
  double avg = 0;
  double max = 0;
};

class SeriesStore {
 public:
  explicit SeriesStore(SeriesStoreOptions options = {});

  // Adds a sample; false when refused (max_series reached for a new key, a
  // time before what the series holds already at the finest tier, a time
  // outside [0, 2^50] ms, a value that is not finite).
  bool Add(const std::string& key, int64_t t_ms, double value);

  // The series from `since_ms` on, in steps of `step_ms` (rounded up to a
  // multiple of the resolution of the finest tier that holds everything
  // from since_ms on; 0 = that resolution): each step's average and maximum.
  // Empty steps are left out. `*step_used` (if given) gets the step used.
  std::vector<Point> Query(const std::string& key, int64_t since_ms, int64_t step_ms,
                           int64_t* step_used = nullptr) const;
  // The mean of the samples at or after `since_ms` (from the finest tier
  // holding them); nullopt when there are none.
  std::optional<double> Mean(const std::string& key, int64_t since_ms) const;
  // The latest raw sample, if at or after `since_ms`.
  std::optional<Point> Last(const std::string& key, int64_t since_ms) const;
  // Keys starting with `prefix`, in order.
  std::vector<std::string> Keys(const std::string& prefix) const;
  // Forgets the series whose keys start with `prefix` (a deleted job's).
  void Erase(const std::string& prefix);
  // Forgets series (of keys starting with `prefix`) with no sample since
  // `before_ms` (their rings are stale anyway).
  size_t EraseIdle(int64_t before_ms, const std::string& prefix = "");

  // Writes the coarse tiers (all but the finest) to `path` atomically
  // (a temporary file, fsync, rename, fsync of the directory), one series at
  // a time under the lock: writers wait for one series' copy, not the file. Load replaces what is held with the
  // file's contents; a missing file is Ok, a damaged one DataLoss (the
  // store is then left empty and the caller goes on: it is history only).
  Status Save(const std::string& path) const;
  Status Load(const std::string& path);

  size_t series() const;
  uint64_t dropped() const;
  // Bytes held by the rings (what memory grows with), plus keys and bookkeeping.
  size_t MemoryBytes() const;
  // The rings' bytes for one series once full, all tiers.
  size_t BytesPerSeries() const;

 private:
  struct Ring {
    int64_t head_slot = -1;       // the newest slot written (time / resolution)
    int64_t first_slot = 0;       // while growing: the slot of element 0
    bool full = false;            // once full: slot s lives at s % points
    std::vector<float> avg, max;  // grown up to the tier's points, then reused (NaN: no sample)
    double sum = 0, peak = 0;                // the open slot's accumulators
    int64_t count = 0;
  };
  struct Series {
    std::vector<Ring> rings;  // one per tier
    int64_t last_ms = 0;
  };
  bool IsCapped(const std::string& key) const;
  void AddToRing(size_t tier, Ring& ring, int64_t t_ms, double value, int64_t weight) const;
  // Slot `slot`'s (avg, max) in ring `tier`, if held.
  bool Get(size_t tier, const Ring& ring, int64_t slot, float* avg, float* max) const;

  const SeriesStoreOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, Series> series_;  // GUARDED_BY(mu_)
  size_t capped_ = 0;                     // GUARDED_BY(mu_): series under capped_prefix
  uint64_t dropped_ = 0;                  // GUARDED_BY(mu_)
};

}  // namespace ringmaster::monitor
