// The communication model of a data-parallel job on a network of equal links:
// how long one step's gradient exchange takes for a ring all-reduce and for
// one parameter server, and the throughput that follows. ringmaster-sim's
// `comm` mode prints it; bench/frameworks prints it beside what it measures.
//
// Every host has one full-duplex link of `rate_bits_per_s` to a switch.
//  - Ring all-reduce (reduce-scatter, then all-gather) over N workers: each
//    worker sends and receives 2(N-1)/N x bytes on its own link, all links at
//    once: 2(N-1)/N x bytes / rate.
//  - One parameter server on a host of its own: every worker pushes its
//    gradients (bytes) and pulls the parameters (bytes); the server's link
//    carries N x bytes each way: N x bytes / rate (a worker's link carries
//    only 1 x bytes each way, so the server's link bounds it).
// `payload_efficiency` is the share of the link's rate that carries payload:
// TCP over Ethernet at MTU 1500 carries 1448 bytes in a 1514-byte frame, and
// tc (and a NIC) counts frames.
#pragma once

#include <string>

namespace ringmaster::sim {

enum class Exchange { kRing, kParameterServer };

struct LinkModel {
  double rate_bits_per_s = 1e9;
  double payload_efficiency = 1448.0 / 1514.0;
};

// Seconds one exchange of `bytes` of gradients among `workers` workers takes.
// One worker exchanges nothing, under either structure: it is the single-worker
// baseline that scaling efficiency divides by (no parameter server at all).
double ExchangeSeconds(Exchange e, double bytes, int workers, const LinkModel& link);

struct StepPrediction {
  double exchange_s = 0;
  // No overlap: compute, then exchange (an upper bound on the step).
  double serial_step_s = 0;
  // Full overlap of the exchange with backward (the lower bound): max(compute, exchange).
  double overlapped_step_s = 0;
  // Samples per second over all workers, for each bound.
  double serial_samples_per_s = 0;
  double overlapped_samples_per_s = 0;
};

// One step of `workers` workers, each computing `compute_s` per step (its
// time alone) on a batch of `batch` samples.
StepPrediction PredictStep(Exchange e, double bytes, int workers, double compute_s, int batch, const LinkModel& link);

// "1gbit", "100mbit", "2.5gbit", "800kbit", or bits per second: false if unparsable or not positive.
bool ParseRate(const std::string& text, double* bits_per_s);

}  // namespace ringmaster::sim
