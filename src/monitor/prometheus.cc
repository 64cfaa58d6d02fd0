#include "monitor/prometheus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/json_limits.h"

namespace ringmaster::monitor {
namespace {

// A broken contract of the caller (a bad name, a sample out of its family):
// the code's constants are wrong, so no scrape could be right.
[[noreturn]] void Die(std::string_view what) {
  std::fprintf(stderr, "prometheus exposition: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

bool IsLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool IsMetricName(std::string_view s) {
  if (s.empty() || !(IsLetter(s[0]) || s[0] == ':')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return IsLetter(c) || IsDigit(c) || c == ':'; });
}

bool IsLabelName(std::string_view s) {
  if (s.empty() || !IsLetter(s[0]) || s.starts_with("__")) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return IsLetter(c) || IsDigit(c); });
}

const char* TypeName(MetricType t) {
  switch (t) {
    case MetricType::kGauge: return "gauge";
    case MetricType::kCounter: return "counter";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

// HELP text escapes only backslash and newline.
void AppendHelp(std::string& out, std::string_view help) {
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
}

// A label value escapes backslash, double quote and newline; bytes that are
// not UTF-8 become U+FFFD (the parser refuses the whole scrape otherwise).
void AppendLabelValue(std::string& out, std::string_view v) {
  while (!v.empty()) {
    size_t bad = InvalidUtf8At(v);
    std::string_view good = v.substr(0, bad == std::string_view::npos ? v.size() : bad);
    for (char c : good) {
      if (c == '\\') out += "\\\\";
      else if (c == '"') out += "\\\"";
      else if (c == '\n') out += "\\n";
      else out += c;
    }
    if (bad == std::string_view::npos) break;
    out += "\xEF\xBF\xBD";
    v.remove_prefix(bad + 1);
  }
}

}  // namespace

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);  // shortest round-trip: "3", "0.25", "1e+20"
}

void Exposition::Family(std::string_view name, MetricType type, std::string_view help) {
  if (!IsMetricName(name)) Die(fmt::format("bad metric name '{}'", name));
  if (std::find(started_.begin(), started_.end(), name) != started_.end()) {
    Die(fmt::format("family '{}' started twice", name));
  }
  started_.emplace_back(name);
  family_ = name;
  type_ = type;
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  AppendHelp(out_, help);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += TypeName(type);
  out_ += '\n';
}

void Exposition::Sample(std::string_view name, const Labels& labels, double value) {
  if (family_.empty() || name != family_) {
    Die(fmt::format("sample '{}' outside its family (the current one is '{}')", name, family_));
  }
  if (type_ == MetricType::kHistogram) Die(fmt::format("'{}' is a histogram: use Histogram()", name));
  WriteSeries(name, "", labels, nullptr, value);
}

void Exposition::Histogram(std::string_view name, const Labels& labels, const HistogramData& h) {
  if (family_.empty() || name != family_) {
    Die(fmt::format("histogram '{}' outside its family (the current one is '{}')", name, family_));
  }
  if (type_ != MetricType::kHistogram) Die(fmt::format("'{}' is not a histogram family", name));
  if (h.counts.size() != h.upper_bounds.size() + 1) {
    Die(fmt::format("histogram '{}': {} counts for {} bounds", name, h.counts.size(), h.upper_bounds.size()));
  }
  for (const auto& [k, v] : labels) {
    if (k == "le") Die(fmt::format("histogram '{}' has a label 'le'", name));
  }
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.upper_bounds.size(); ++i) {
    cumulative += h.counts[i];
    std::string le = FormatValue(h.upper_bounds[i]);
    WriteSeries(name, "_bucket", labels, le.c_str(), static_cast<double>(cumulative));
  }
  cumulative += h.counts.back();
  WriteSeries(name, "_bucket", labels, "+Inf", static_cast<double>(cumulative));
  WriteSeries(name, "_sum", labels, nullptr, h.sum);
  WriteSeries(name, "_count", labels, nullptr, static_cast<double>(cumulative));
}

void Exposition::WriteSeries(std::string_view name, std::string_view suffix, const Labels& labels, const char* le,
                             double value) {
  out_ += name;
  out_ += suffix;
  if (!labels.empty() || le != nullptr) {
    out_ += '{';
    bool first = true;
    for (size_t i = 0; i < labels.size(); ++i) {
      const auto& [k, v] = labels[i];
      if (!IsLabelName(k)) Die(fmt::format("'{}': bad label name '{}'", name, k));
      for (size_t j = 0; j < i; ++j) {
        if (labels[j].first == k) Die(fmt::format("'{}': label '{}' twice", name, k));
      }
      if (!first) out_ += ',';
      first = false;
      out_ += k;
      out_ += "=\"";
      AppendLabelValue(out_, v);
      out_ += '"';
    }
    if (le != nullptr) {
      if (!first) out_ += ',';
      out_ += "le=\"";
      out_ += le;
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += FormatValue(value);
  out_ += '\n';
}

std::string Exposition::Take() {
  std::string out = std::move(out_);
  out_.clear();
  family_.clear();
  started_.clear();
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(upper_bounds_.size() + 1)) {
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    if (!std::isfinite(upper_bounds_[i])) Die("histogram bounds must be finite (+Inf is implied)");
    if (i > 0 && !(upper_bounds_[i - 1] < upper_bounds_[i])) Die("histogram bounds must be strictly ascending");
  }
}

void Histogram::Observe(double v) {
  // The first bound >= v (le is inclusive); NaN compares false with every
  // bound and belongs in +Inf, not the first bucket lower_bound would give.
  size_t i = std::isnan(v) ? upper_bounds_.size()
                           : std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) - upper_bounds_.begin();
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

HistogramData Histogram::Snapshot() const {
  HistogramData h;
  h.upper_bounds = upper_bounds_;
  h.counts.resize(upper_bounds_.size() + 1);
  for (size_t i = 0; i < h.counts.size(); ++i) h.counts[i] = counts_[i].load(std::memory_order_relaxed);
  h.sum = sum_.load(std::memory_order_relaxed);
  return h;
}

}  // namespace ringmaster::monitor
