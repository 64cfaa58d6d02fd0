// Exposition's text read by Prometheus' own parser and linter
// (`promtool check metrics`), with every family of the server's /metrics
// contract (docs/monitoring.md) and the awkward values: escapes, NaN, ±Inf,
// not-UTF-8 bytes. Skipped when promtool is not installed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "common/subprocess.h"
#include "monitor/prometheus.h"

namespace ringmaster::monitor {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string ContractExposition() {
  const Labels node = {{"node", "node-a"}};
  const Labels odd_node = {{"node", "we\\ird \"node\"\nname\xFF"}};
  Exposition e;
  auto gauge = [&](const char* name, const char* help, const std::vector<std::pair<Labels, double>>& samples) {
    e.Family(name, MetricType::kGauge, help);
    for (const auto& [labels, v] : samples) e.Sample(name, labels, v);
  };
  auto counter = [&](const char* name, const char* help, const std::vector<std::pair<Labels, double>>& samples) {
    e.Family(name, MetricType::kCounter, help);
    for (const auto& [labels, v] : samples) e.Sample(name, labels, v);
  };
  gauge("ringmaster_node_ready", "1 when the node is ready.", {{node, 1}, {odd_node, 0}});
  gauge("ringmaster_node_cpu_ratio", "CPU busy, 0..1.", {{node, 0.25}, {odd_node, std::nan("")}});
  gauge("ringmaster_node_memory_used_bytes", "Memory in use.", {{node, 3.5 * (1 << 30)}});
  gauge("ringmaster_node_memory_bytes", "Memory in total.", {{node, 17179869184.0}});
  gauge("ringmaster_node_disk_used_bytes", "Disk in use.", {{node, 1e12}});
  gauge("ringmaster_node_network_receive_bytes_per_second", "Received.", {{node, 1234.5}});
  gauge("ringmaster_node_network_transmit_bytes_per_second", "Sent.", {{node, 0}});
  const Labels gpu = {{"node", "node-a"}, {"gpu", "0"}};
  gauge("ringmaster_gpu_utilisation_ratio", "GPU busy, 0..1.", {{gpu, 0.97}});
  gauge("ringmaster_gpu_memory_used_bytes", "GPU memory in use.", {{gpu, 8e10}});
  gauge("ringmaster_gpu_power_watts", "GPU power.", {{gpu, 312.5}});
  gauge("ringmaster_gpu_temperature_celsius", "GPU temperature.", {{gpu, 64}});
  const Labels task = {{"job", "17"}, {"rank", "0"}, {"user", "alice"}};
  gauge("ringmaster_task_cpu_cores", "CPU cores a task uses.", {{task, 1.75}});
  gauge("ringmaster_task_memory_bytes", "Memory a task uses.", {{task, 6.4e7}});
  gauge("ringmaster_task_pids", "Processes of a task.", {{task, 3}});
  counter("ringmaster_task_oom_kills_total", "OOM kills in a task.", {{task, 0}});
  std::vector<std::pair<Labels, double>> jobs;
  for (const char* s : {"pending", "scheduled", "running", "succeeded", "failed", "cancelled"}) {
    jobs.push_back({{{"state", s}, {"user", "alice"}}, 1});
  }
  gauge("ringmaster_jobs", "Jobs by state and user.", jobs);
  gauge("ringmaster_scheduler_queue_length", "Jobs waiting.", {{{}, 2}});
  gauge("ringmaster_scheduler_pending_jobs", "Pending jobs by reason.", {{{{"reason", "resources"}}, 2}});
  counter("ringmaster_scheduler_placements_total", "Tasks placed.", {{{}, 40}});
  counter("ringmaster_scheduler_preemptions_total", "Tasks preempted.", {{{}, 0}});
  Histogram pass({0.001, 0.01, 0.1, 1});
  for (double v : {0.0005, 0.02, 3.0}) pass.Observe(v);
  e.Family("ringmaster_scheduler_pass_seconds", MetricType::kHistogram, "Scheduler pass time.");
  e.Histogram("ringmaster_scheduler_pass_seconds", {}, pass.Snapshot());
  counter("ringmaster_http_requests_total", "HTTP requests.",
          {{{{"route", "/api/v1/jobs/{id}"}, {"method", "GET"}, {"code", "200"}}, 7}});
  Histogram latency({0.005, 0.05, 0.5});
  latency.Observe(0.004);
  latency.Observe(kInf);
  e.Family("ringmaster_http_request_duration_seconds", MetricType::kHistogram, "HTTP latency.\nSecond line \\.");
  e.Histogram("ringmaster_http_request_duration_seconds", {{"route", "/api/v1/jobs"}, {"method", "POST"}},
              latency.Snapshot());
  gauge("ringmaster_test_special_values", "Values the parser must read.", {{{{"v", "-inf"}}, -kInf}});
  return e.Take();
}

TEST(PromtoolCheckMetrics, AcceptsTheContractFamilies) {
  if (std::system("command -v promtool > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool is not installed (Debian package prometheus)";
  }
  const std::string text = ContractExposition();
  char path[] = "/tmp/rm-promtool-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  // promtool reads the exposition on stdin; it exits 1 on a parse error or a
  // lint problem (naming conventions) and says which on stderr.
  auto out = RunTool({"sh", "-c", "promtool check metrics < \"$0\"", path});
  unlink(path);
  EXPECT_TRUE(out.ok()) << out.status().ToString() << "\n---- the text:\n" << text;
}

}  // namespace
}  // namespace ringmaster::monitor
