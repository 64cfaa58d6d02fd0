#include "sim/trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iterator>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/json_limits.h"

namespace ringmaster::sim {
namespace {

// A non-negative decimal integer of 1..9 digits (no sign, no spaces).
std::optional<int> SmallInt(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

// A finite decimal number, the whole of `s`.
std::optional<double> Number(std::string_view s) {
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::general);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
// days_from_civil). REQUIRES: 1 <= m <= 12, and y small enough not to overflow.
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// "YYYY-MM-DD HH:MM:SS" (UTC) as seconds since the epoch.
std::optional<int64_t> Timestamp(std::string_view s) {
  // Split on '-', ' ', ':' at fixed places: Y-M-D H:M:S.
  int v[6];
  const char seps[] = {'-', '-', ' ', ':', ':'};
  for (int k = 0; k < 6; ++k) {
    const size_t end = k < 5 ? s.find(seps[k]) : s.size();
    if (end == std::string_view::npos) return std::nullopt;
    const auto part = SmallInt(s.substr(0, end));
    if (!part) return std::nullopt;
    v[k] = *part;
    s.remove_prefix(k < 5 ? end + 1 : end);
  }
  const auto [year, month, day, hour, minute, second] = v;
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (year < 1970 || year > 9999 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 60) {
    return std::nullopt;
  }
  const bool leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
  if (day > kDays[month - 1] + (month == 2 && leap)) return std::nullopt;
  return DaysFromCivil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second;
}

}  // namespace

StatusOr<std::vector<TraceJob>> ParsePhillyTrace(std::string_view csv) {
  struct Row {
    int64_t t;
    TraceJob job;
  };
  std::vector<Row> rows;
  size_t n = 0;
  while (!csv.empty()) {
    ++n;
    const size_t nl = csv.find('\n');
    std::string_view line = csv.substr(0, nl);
    csv.remove_prefix(nl == std::string_view::npos ? csv.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (n == 1) {
      if (line.rfind("timestamp,duration,num_gpus", 0) != 0) {
        return InvalidArgument("line 1 is not the Philly header timestamp,duration,num_gpus,...");
      }
      continue;
    }
    if (line.empty()) continue;
    const auto bad = [&](std::string_view why) {
      return InvalidArgument(fmt::format("line {}: {}: {}", n, why, Printable(line, 80)));
    };
    std::string_view f[5];
    size_t fields = 0;
    for (std::string_view rest = line; fields < 5;) {
      const size_t comma = rest.find(',');
      f[fields++] = rest.substr(0, comma);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
      if (fields == 5) return bad("more than 5 fields (timestamp,duration,num_gpus,gpu_time,cluster)");
    }
    if (fields < 4) return bad("not timestamp,duration,num_gpus,gpu_time,cluster");
    const auto t = Timestamp(f[0]);
    if (!t) return bad("the timestamp is not YYYY-MM-DD HH:MM:SS");
    const auto duration = Number(f[1]);
    if (!duration || *duration < 0 || *duration > kMaxTraceDurationS) {
      return bad(fmt::format("duration is not a number of seconds from 0 to {:g}", kMaxTraceDurationS));
    }
    const auto gpus = SmallInt(f[2]);
    if (!gpus || *gpus < 1 || *gpus > kMaxTraceGpus) {
      return bad(fmt::format("num_gpus is not an integer from 1 to {}", kMaxTraceGpus));
    }
    const auto gpu_time = Number(f[3]);
    if (!gpu_time || *gpu_time < 0) return bad("gpu_time is not a number >= 0");
    if (fields == 5 && (f[4].size() > kMaxTraceClusterBytes || !IsValidUtf8(f[4]))) {
      return bad(fmt::format("the cluster is not a name of at most {} bytes", kMaxTraceClusterBytes));
    }
    Row r{*t, {}};
    r.job.duration_s = static_cast<int64_t>(*duration);
    r.job.gpus = *gpus;
    if (fields == 5) r.job.cluster = f[4];
    rows.push_back(std::move(r));
  }
  if (n == 0) return InvalidArgument("empty: no Philly header");
  if (rows.empty()) return InvalidArgument("no jobs");
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.t < b.t; });
  std::vector<TraceJob> jobs;
  jobs.reserve(rows.size());
  for (auto& r : rows) {
    r.job.id = static_cast<int64_t>(jobs.size()) + 1;
    r.job.submit_s = r.t - rows.front().t;
    jobs.push_back(std::move(r.job));
  }
  return jobs;
}

StatusOr<Throughputs> ParseGavelThroughputs(std::string_view json) {
  // Gavel's file is about 1.2 MB, 4 levels deep.
  RM_ASSIGN_OR_RETURN(const nlohmann::json doc,
                      ParseJson(json, {.max_bytes = 256 << 20, .max_depth = 16}, "throughputs"));
  if (!doc.is_object()) return InvalidArgument("not a JSON object of GPU types");
  Throughputs out;
  for (const auto& [type, models] : doc.items()) {
    if (type.find("_unconsolidated") != std::string::npos || !models.is_object()) continue;
    for (const auto& [key, partners] : models.items()) {
      // Keys look like "('ResNet-18 (batch size 16)', 1)": the model and its scale factor.
      const size_t open = key.find('\''), close = key.rfind('\'');
      if (open == std::string::npos || close <= open || key.find(", 1)", close) == std::string::npos) continue;
      if (!partners.is_object()) continue;
      const auto null = partners.find("null");
      if (null == partners.end() || !null->is_number()) continue;
      const double tput = null->get<double>();
      if (tput > 0 && std::isfinite(tput)) out[key.substr(open + 1, close - open - 1)][type] = tput;
    }
  }
  if (out.empty()) return InvalidArgument("no single-GPU throughputs (\"null\" entries) found");
  return out;
}

namespace {

StatusOr<std::string> ReadFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(fmt::format("{}: cannot open {}", what, path));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Unavailable(fmt::format("{}: cannot read {}", what, path));
  return text;
}

}  // namespace

StatusOr<std::vector<TraceJob>> LoadPhillyTrace(const std::string& path) {
  RM_ASSIGN_OR_RETURN(const std::string text, ReadFile(path, "trace"));
  auto jobs = ParsePhillyTrace(text);
  if (!jobs.ok()) return jobs.status().Annotate(path);
  return jobs;
}

StatusOr<Throughputs> LoadGavelThroughputs(const std::string& path) {
  RM_ASSIGN_OR_RETURN(const std::string text, ReadFile(path, "throughputs"));
  auto out = ParseGavelThroughputs(text);
  if (!out.ok()) return out.status().Annotate(path);
  return out;
}

}  // namespace ringmaster::sim
