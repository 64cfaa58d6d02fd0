#include "sim/comm_model.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace ringmaster::sim {

double ExchangeSeconds(Exchange e, double bytes, int workers, const LinkModel& link) {
  if (workers <= 1) return 0;
  const double payload_bytes_per_s = link.rate_bits_per_s * link.payload_efficiency / 8;
  const double n = workers;
  const double on_busiest_link = e == Exchange::kRing ? 2 * (n - 1) / n * bytes : n * bytes;
  return on_busiest_link / payload_bytes_per_s;
}

StepPrediction PredictStep(Exchange e, double bytes, int workers, double compute_s, int batch, const LinkModel& link) {
  StepPrediction p;
  p.exchange_s = ExchangeSeconds(e, bytes, workers, link);
  p.serial_step_s = compute_s + p.exchange_s;
  p.overlapped_step_s = std::max(compute_s, p.exchange_s);
  const double samples = static_cast<double>(workers) * batch;
  if (p.serial_step_s > 0) p.serial_samples_per_s = samples / p.serial_step_s;
  if (p.overlapped_step_s > 0) p.overlapped_samples_per_s = samples / p.overlapped_step_s;
  return p;
}

bool ParseRate(const std::string& text, double* bits_per_s) {
  std::string s;
  for (char c : text) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double unit = 1;
  for (auto [suffix, mult] : {std::pair{"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"bit", 1.0}}) {
    const std::string suf = suffix;
    if (s.size() > suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0) {
      s.resize(s.size() - suf.size());
      unit = mult;
      break;
    }
  }
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !(v > 0)) return false;
  *bits_per_s = v * unit;
  return true;
}

}  // namespace ringmaster::sim
