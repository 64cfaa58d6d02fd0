#include "common/units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace ringmaster {
namespace {

// Parses a non-negative decimal number prefix; returns chars consumed.
std::optional<double> ParseNumber(const std::string& text, size_t* consumed) {
  size_t i = 0;
  bool digits = false, dot = false;
  while (i < text.size()) {
    char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits = true;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
    ++i;
  }
  if (!digits) return std::nullopt;
  *consumed = i;
  return std::strtod(text.substr(0, i).c_str(), nullptr);
}

}  // namespace

std::optional<int64_t> ParseCpuMilli(const std::string& text) {
  size_t n = 0;
  auto v = ParseNumber(text, &n);
  if (!v) return std::nullopt;
  std::string suffix = text.substr(n);
  double milli;
  if (suffix.empty()) {
    milli = *v * 1000.0;
  } else if (suffix == "m") {
    milli = *v;
  } else {
    return std::nullopt;
  }
  if (!std::isfinite(milli) || milli > 1e12) return std::nullopt;
  return static_cast<int64_t>(std::llround(milli));
}

std::optional<int64_t> ParseBytes(const std::string& text) {
  size_t n = 0;
  auto v = ParseNumber(text, &n);
  if (!v) return std::nullopt;
  std::string s = text.substr(n);
  if (!s.empty() && (s.back() == 'B' || s.back() == 'b') && s != "b") s.pop_back();
  double mult;
  if (s.empty()) mult = 1;
  else if (s == "K" || s == "k") mult = 1e3;
  else if (s == "M") mult = 1e6;
  else if (s == "G") mult = 1e9;
  else if (s == "T") mult = 1e12;
  else if (s == "Ki") mult = 1024.0;
  else if (s == "Mi") mult = 1024.0 * 1024;
  else if (s == "Gi") mult = 1024.0 * 1024 * 1024;
  else if (s == "Ti") mult = 1024.0 * 1024 * 1024 * 1024;
  else return std::nullopt;
  double bytes = *v * mult;
  if (!std::isfinite(bytes) || bytes > 9e18) return std::nullopt;
  return static_cast<int64_t>(std::llround(bytes));
}

std::string FormatCpu(int64_t milli) {
  if (milli % 1000 == 0) return fmt::format("{}", milli / 1000);
  std::string s = fmt::format("{:.3f}", milli / 1000.0);
  while (s.back() == '0') s.pop_back();
  return s;
}

std::string FormatBytes(int64_t bytes) {
  static const char* kUnits[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{}", bytes);
  if (std::fabs(v - std::round(v)) < 0.05) return fmt::format("{:.0f}{}", v, kUnits[u]);
  return fmt::format("{:.1f}{}", v, kUnits[u]);
}

}  // namespace ringmaster
