// Prometheus text exposition format 0.0.4, written by hand: the server reads
// its own state at scrape time and writes it out through an Exposition (the
// collector pattern), so there is no registry of long-lived metric objects.
// Exposition is one scrape's text and not thread-safe; Histogram is the one
// long-lived metric (e.g. request latency), safe to Observe from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ringmaster::monitor {

// Label pairs in the order they are written. Names are the code's own
// constants; values are data (node names, users) and are escaped.
using Labels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kGauge, kCounter, kHistogram };

// A histogram's state at one instant. counts[i] is the number of
// observations in (upper_bounds[i-1], upper_bounds[i]] (not cumulative);
// counts.back() is those above the last bound (the +Inf bucket), so
// counts.size() == upper_bounds.size() + 1.
struct HistogramData {
  std::vector<double> upper_bounds;  // strictly ascending, finite
  std::vector<uint64_t> counts;
  double sum = 0;
};

// Builds the text of one scrape:
//   Family("ringmaster_jobs", MetricType::kGauge, "Jobs by state.");
//   Sample("ringmaster_jobs", {{"state", "running"}}, 3);
//   std::string body = Take();  // serve as text/plain; version=0.0.4
// Names are checked, not sanitised: a metric name outside
// [a-zA-Z_:][a-zA-Z0-9_:]*, a label name outside [a-zA-Z_][a-zA-Z0-9_]* (or
// starting "__"), a family started twice, an unknown family or a sample of
// another family than the current one is a programming error and aborts with
// a message. Label values that are not valid UTF-8 get U+FFFD for each bad
// byte (the scrape would otherwise fail whole). Writing one series twice is
// the caller's mistake and not detected.
class Exposition {
 public:
  // Starts a family: its "# HELP" and "# TYPE" lines. Every sample after it,
  // up to the next Family, belongs to it. A counter's name ends in "_total"
  // (the 0.0.4 format names a counter's family and samples alike).
  // REQUIRES: `name` not started before in this Exposition.
  void Family(std::string_view name, MetricType type, std::string_view help);

  // One sample of the current gauge or counter family.
  // REQUIRES: `name` is the current family's name, and its type is not kHistogram.
  void Sample(std::string_view name, const Labels& labels, double value);

  // One histogram series of the current histogram family: name_bucket{le=...}
  // for each bound, cumulative, then le="+Inf", name_sum and name_count.
  // REQUIRES: `name` is the current family's name, of type kHistogram; no
  // "le" in `labels`; h.counts.size() == h.upper_bounds.size() + 1.
  void Histogram(std::string_view name, const Labels& labels, const HistogramData& h);

  // The text so far; the Exposition starts over empty.
  std::string Take();

 private:
  void WriteSeries(std::string_view name, std::string_view suffix, const Labels& labels, const char* le,
                   double value);

  std::string out_;
  std::string family_;  // the current family
  MetricType type_ = MetricType::kGauge;
  std::vector<std::string> started_;
};

// A fixed-bucket histogram: Observe is lock-free (one atomic add per bucket
// and one on the sum), so request handlers call it on their own threads.
// Snapshot is not atomic across buckets: taken during an Observe, the sum may
// miss that one observation while its bucket has it (the count is the sum of
// the buckets, so _count and le="+Inf" always agree). NaN lands in the +Inf
// bucket and makes the sum NaN, as in Prometheus' own client libraries.
class Histogram {
 public:
  // REQUIRES: upper_bounds strictly ascending and finite (aborts otherwise);
  // the +Inf bucket is implied.
  explicit Histogram(std::vector<double> upper_bounds);

  void Observe(double v);
  HistogramData Snapshot() const;

 private:
  const std::vector<double> upper_bounds_;
  const std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // upper_bounds_.size() + 1
  std::atomic<double> sum_{0};
};

// `v` as the format reads it: NaN, +Inf, -Inf, else the shortest text that
// reads back as the same double ("3", "0.25", "1e+20").
std::string FormatValue(double v);

}  // namespace ringmaster::monitor
