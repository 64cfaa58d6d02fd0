#include "cli/nodes.h"

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/strings.h"

namespace ringmaster::cli {
namespace {

using nlohmann::json;

std::string Path(const std::string& node, const std::string& verb = "") {
  return "/api/v1/nodes/" + PercentEncode(node, true) + (verb.empty() ? "" : "/" + verb);
}

// The node's row in GET /api/v1/nodes (null when it is gone).
json FindRow(const client::ApiClient& api, const std::string& node) {
  json r = Must(api.Get("/api/v1/nodes"));
  for (const json& n : r["nodes"]) {
    if (n.value("name", "") == node || std::to_string(n.value("id", int64_t{0})) == node) return n;
  }
  return nullptr;
}

}  // namespace

int NodesCordon(const Connection& c, const std::string& node, const std::string& reason) {
  json r = Must(Connect(c).Post(Path(node, "cordon"), json{{"reason", reason}}));
  std::cerr << fmt::format("node {} cordoned: it gets no new work (ringmaster nodes uncordon {} undoes it)\n",
                           r.value("node", node), r.value("node", node));
  return 0;
}

int NodesUncordon(const Connection& c, const std::string& node) {
  json r = Must(Connect(c).Post(Path(node, "uncordon"), json::object()));
  std::cerr << fmt::format("node {} uncordoned: it takes new work\n", r.value("node", node));
  return 0;
}

int NodesDrain(const Connection& c, const std::string& node, const std::string& reason, double timeout_s,
               bool no_wait) {
  auto api = Connect(c);
  json r = Must(api.Post(Path(node, "drain"), json{{"reason", reason}}));
  const std::string name = r.value("node", node);
  std::cerr << fmt::format("node {} draining: no new work; its jobs checkpoint and move to other nodes\n", name);
  if (no_wait) return 0;
  const auto start = std::chrono::steady_clock::now();
  const bool tty = isatty(STDERR_FILENO);
  std::string last;
  while (true) {
    json n = FindRow(api, name);
    if (n.is_null()) Die("node " + name + " is gone (deleted meanwhile)");
    const int64_t tasks = n["allocated"].value("tasks", int64_t{0});
    const auto waited = std::chrono::steady_clock::now() - start;
    if (tasks == 0) {
      if (tty && !last.empty()) std::cerr << "\n";
      std::cerr << fmt::format("node {} is drained: no task is placed there; `ringmaster nodes delete {}` once its "
                               "agent is stopped, or `ringmaster nodes uncordon {}` to use it again\n",
                               name, name, name);
      return 0;
    }
    if (timeout_s > 0 && waited > std::chrono::duration<double>(timeout_s)) {
      if (tty) std::cerr << "\n";
      std::cerr << fmt::format("node {} still holds {} tasks after {:.0f} s; it keeps draining (see `ringmaster nodes`)\n",
                               name, tasks, timeout_s);
      return 1;
    }
    const std::string line = fmt::format(
        "draining {}: {} tasks left ({})", name, tasks,
        FormatDuration(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()));
    if (tty) {
      std::cerr << "\r" << line << "\033[K" << std::flush;
    } else if (line.substr(0, line.find('(')) != last.substr(0, last.find('('))) {
      std::cerr << line << "\n";  // a line when the count changes
    }
    last = line;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

int NodesDelete(const Connection& c, const std::string& node, bool force) {
  json r = Must(Connect(c).Delete(Path(node) + (force ? "?force=1" : "")));
  std::cerr << fmt::format("node {} deleted: its tasks, if any, are lost (their jobs restart elsewhere within their "
                           "max_restarts)\n",
                           r.value("node", node));
  return 0;
}

}  // namespace ringmaster::cli
