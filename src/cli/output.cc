#include "cli/output.h"

#include <algorithm>

#include <ctime>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/json_limits.h"
#include "common/units.h"

namespace ringmaster::cli {
namespace {

using nlohmann::json;

// Milliseconds since the epoch from "2026-12-02T15:03:50.123Z"; 0 if empty.
int64_t ParseTime(const std::string& s) {
  struct tm tm = {};
  int ms = 0;
  if (sscanf(s.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
             &tm.tm_sec, &ms) != 7) {
    return 0;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm)) * 1000 + ms;
}

std::string Age(const json& j, const char* field) {
  int64_t t = ParseTime(j.value(field, ""));
  return t ? FormatDuration(RealClock::Get()->NowMs() - t) : "-";
}

// Every cell escaped (EscapeControl is idempotent): a name or reason cannot
// break a row or move the cursor.
void PrintTable(std::vector<std::vector<std::string>> rows) {
  for (auto& r : rows) {
    for (auto& cell : r) cell = EscapeControl(cell);
  }
  std::vector<size_t> width;
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += i + 1 == r.size() ? r[i] : fmt::format("{:<{}}  ", r[i], width[i]);
    }
    std::cout << line << "\n";
  }
}

// A field as shown on a terminal: what a client sent (names, paths, reasons
// quoting them) never carries a control character to it.
std::string Str(const json& j, const char* f) {
  if (!j.contains(f) || j[f].is_null()) return "";
  return EscapeControl(j[f].is_string() ? j[f].get<std::string>() : j[f].dump());
}

}  // namespace

void PrintJobs(const json& jobs) {
  std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "KIND", "USER", "STATE", "AGE", "REASON"}};
  for (const auto& j : jobs) {
    std::string reason = Str(j, "reason");
    if (j.contains("stopping")) reason = "stopping: " + Str(j, "stopping");
    if (reason.size() > 80) reason = reason.substr(0, 77) + "...";
    rows.push_back({Str(j, "id"), Str(j, "name"), Str(j, "kind"), Str(j, "user"), Str(j, "state"),
                    Age(j, "created_at"), reason});
  }
  PrintTable(rows);
}

// The job's latest metrics: the usual training ones first, then the rest.
void PrintMetrics(const json& m) {
  static const char* kFirst[] = {"step", "epoch", "loss", "accuracy", "samples_per_s"};
  std::vector<std::string> order(std::begin(kFirst), std::end(kFirst));
  for (const auto& [k, v] : m.items()) {
    if (std::find(order.begin(), order.end(), k) == order.end() && k != "attempt" && k != "time_ms") order.push_back(k);
  }
  std::cout << "\nmetrics:\n";
  for (const std::string& k : order) {
    if (!m.contains(k)) continue;
    const json& v = m[k];
    std::string text = v.is_number_float() ? fmt::format("{:.4f}", v.get<double>())
                       : v.is_string()     ? v.get<std::string>()
                                           : v.dump();
    std::cout << fmt::format("  {:<14} {}\n", EscapeControl(k), EscapeControl(text));
  }
}

void PrintJob(const json& j) {
  std::cout << fmt::format("job {}  {}  ({}, {} replica{}, user {})\n", Str(j, "id"), Str(j, "name"), Str(j, "kind"),
                           Str(j, "replicas"), j.value("replicas", 1) == 1 ? "" : "s", Str(j, "user"));
  std::string state = Str(j, "state");
  std::string reason = Str(j, "reason");
  std::cout << fmt::format("state:    {}\n", state);
  if (!reason.empty()) std::cout << fmt::format("reason:   {}{}\n", state == "PENDING" ? "pending: " : "", reason);
  if (j.contains("stopping")) std::cout << fmt::format("stopping: {}\n", Str(j, "stopping"));
  std::cout << fmt::format("created:  {}\n", Str(j, "created_at"));
  if (!Str(j, "started_at").empty()) std::cout << fmt::format("started:  {}\n", Str(j, "started_at"));
  if (!Str(j, "finished_at").empty()) std::cout << fmt::format("finished: {}\n", Str(j, "finished_at"));
  // Stragglers and idle allocations the server sees now (docs/monitoring.md).
  if (j.contains("flags") && j["flags"].is_array()) {
    for (const auto& f : j["flags"]) std::cout << fmt::format("flagged:  {}\n", Str(f, "message"));
  }
  std::cout << fmt::format("restarts: {} of {}\n", Str(j, "restarts"), Str(j, "max_restarts"));
  if (j.contains("spec")) {
    // The image as the server pinned it: the digest every task and restart runs.
    if (const std::string image = Str(j["spec"], "image"); !image.empty()) std::cout << fmt::format("image:    {}\n", image);
    const json& r = j["spec"]["resources"];
    std::cout << fmt::format("request:  {} x {{cpu {}, memory {}, gpu {}}}\n", Str(j, "replicas"), Str(r, "cpu"),
                             FormatBytes(r.value("memory", int64_t{0})), Str(r, "gpu"));
  }
  if (j.contains("metrics")) PrintMetrics(j["metrics"]);
  if (j.contains("tasks")) {
    std::cout << "\ntasks:\n";
    std::vector<std::vector<std::string>> rows = {{"RANK", "STATE", "NODE", "ATTEMPT", "EXIT", "REASON"}};
    for (const auto& t : j["tasks"]) {
      rows.push_back({Str(t, "rank"), Str(t, "state"), Str(t, "node").empty() ? "-" : Str(t, "node"),
                      Str(t, "attempt"), Str(t, "exit_code").empty() ? "-" : Str(t, "exit_code"), Str(t, "reason")});
    }
    PrintTable(rows);
  }
  if (j.contains("events")) {
    std::cout << "\nevents:\n";
    for (const auto& e : j["events"]) {
      std::string who = e.contains("rank") ? fmt::format("rank {}", e["rank"].get<int>()) : "job";
      std::cout << fmt::format("  {}  {:<7} {:>9} -> {:<9} {}\n", Str(e, "time"), who,
                               Str(e, "from").empty() ? "" : Str(e, "from"), Str(e, "to"), Str(e, "reason"));
    }
  }
}

// Slurm's nodes (the server's --backend slurm): their state and reason as Slurm says.
void PrintSlurmNodes(const json& nodes) {
  std::vector<std::vector<std::string>> rows = {{"NAME", "STATE", "CPU", "MEMORY", "GRES", "ALLOCATED", "REASON"}};
  for (const auto& n : nodes) {
    const json& a = n["allocated"];
    rows.push_back({Str(n, "name"), Str(n, "state"), Str(n, "cpu"), FormatBytes(n.value("memory_bytes", int64_t{0})),
                    n.value("gres", "").empty() ? "-" : Str(n, "gres"),
                    fmt::format("{} cpu, {}, {} gpu", Str(a, "cpu"), FormatBytes(a.value("memory_bytes", int64_t{0})),
                                Str(a, "gpus")),
                    Str(n, "reason")});
  }
  PrintTable(rows);
}

void PrintNodes(const json& nodes) {
  if (!nodes.empty() && nodes[0].value("slurm", false)) return PrintSlurmNodes(nodes);
  std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "STATE", "CPU", "MEMORY", "GPUS", "ALLOCATED", "CPU USE", "MEM USE", "HEARTBEAT", "EXECUTORS", "NETWORK", "LABELS"}};
  for (const auto& n : nodes) {
    const json& a = n["allocated"];
    const json& u = n["usage"];
    std::string gpus = std::to_string(n["gpus"].size());
    if (!n["gpus"].empty()) gpus += " x " + n["gpus"][0].value("model", "?");
    std::string labels;
    if (n.contains("labels") && n["labels"].is_object()) {
      for (const auto& [k, v] : n["labels"].items()) labels += (labels.empty() ? "" : ",") + k + "=" + v.get<std::string>();
    }
    // An admin's cordon or drain follows the state: "ready (draining: kernel update)".
    std::string state = Str(n, "state");
    if (!n.value("cordon", "").empty()) {
      std::string cordon = n.value("cordon", "");
      if (n.value("drained", false) && cordon.rfind("draining", 0) == 0) cordon = "drained" + cordon.substr(8);
      state += " (" + cordon + ")";
    }
    rows.push_back({Str(n, "id"), Str(n, "name"), state, Str(n, "cpu"),
                    FormatBytes(n.value("memory_bytes", int64_t{0})), gpus,
                    fmt::format("{} cpu, {}, {} gpu, {} tasks", Str(a, "cpu"), FormatBytes(a.value("memory_bytes", int64_t{0})),
                                Str(a, "gpus"), Str(a, "tasks")),
                    fmt::format("{:.0f}%", 100 * u.value("cpu_util", 0.0)), FormatBytes(u.value("memory_used_bytes", int64_t{0})),
                    FormatDuration(n.value("last_heartbeat_age_ms", int64_t{0})) + " ago", n.value("executors", "process"),
                    n.value("network", "host") == "host" ? "host"
                                                         : n.value("network", "") + " " + n.value("overlay_block", ""),
                    labels});
  }
  PrintTable(rows);
}

}  // namespace ringmaster::cli
