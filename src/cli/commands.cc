#include "cli/commands.h"

#include "common/crypto.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <iostream>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "cli/output.h"
#include "common/files.h"
#include "common/json_limits.h"
#include "common/units.h"

namespace ringmaster::cli {

using nlohmann::json;

namespace {

std::string ReadSpec(const std::string& file) {
  if (file == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  auto text = ReadFile(file);
  if (!text.ok()) Die("cannot read " + file);
  return *text;
}

// Like sbatch: a job without working_dir runs where it was submitted from.
// Not one with an image: this host's directory is not in its container (it
// runs in its work directory, where its inputs are staged).
std::string WithWorkingDir(const std::string& text) {
  try {
    YAML::Node root = YAML::Load(text);
    if (!root.IsMap() || root["working_dir"] || (root["image"] && !root["image"].IsNull())) return text;
    root["working_dir"] = std::filesystem::current_path().string();
    YAML::Emitter out;
    out << root;
    return out.c_str();
  } catch (...) {
    return text;  // the server reports what is wrong with it
  }
}

}  // namespace

int Submit(const Connection& c, const std::string& file, bool no_workdir) {
  std::string text = ReadSpec(file);
  if (!no_workdir) text = WithWorkingDir(text);
  // One key for this submit and each of its retries (another server, a lost
  // answer): the server makes one job of them.
  client::CallOptions once;
  once.headers.emplace_back("Idempotency-Key", RandomHex(16));
  auto res = Connect(c).PostText("/api/v1/jobs", text, "application/yaml", once);
  if (!res.ok()) Die(fmt::format("{}: {}", file, res.status().message()));
  std::cout << res->at("id").get<int64_t>() << "\n";
  return 0;
}

int Logs(const Connection& c, int64_t id, bool follow, int rank) {
  auto api = Connect(c);
  std::string path = fmt::format("/api/v1/jobs/{}/logs", id);
  std::string q = rank >= 0 ? fmt::format("rank={}", rank) : "";
  if (!follow) {
    Status st = api.Stream(path + (q.empty() ? "" : "?" + q), [&](const char* d, size_t n) {
      std::cout.write(d, static_cast<std::streamsize>(n));
      return true;
    });
    std::cout.flush();
    if (!st.ok()) Die(st.message());
    return 0;
  }
  std::string buf;
  json end;
  std::set<int> continuing;  // ranks in the middle of a long line
  Status st = api.Stream(path + "?follow=1" + (q.empty() ? "" : "&" + q), [&](const char* d, size_t n) {
    buf.append(d, n);
    size_t start = 0, nl;
    while ((nl = buf.find('\n', start)) != std::string::npos) {
      json rec = json::parse(buf.substr(start, nl - start), nullptr, false);
      start = nl + 1;
      if (rec.is_discarded()) continue;
      if (rec.contains("line")) {
        // A long line arrives in pieces ("partial": true): one prefix, one newline.
        const int r = rec["rank"].get<int>();
        if (!continuing.count(r)) std::cout << "[" << r << "] ";
        std::cout << rec["line"].get<std::string>();
        if (rec.value("partial", false)) {
          continuing.insert(r);
        } else {
          continuing.erase(r);
          std::cout << "\n";
        }
      } else if (rec.contains("end")) {
        end = rec;
      }
    }
    buf.erase(0, start);
    std::cout.flush();
    return true;
  });
  if (!st.ok()) Die(st.message());
  if (end.is_null()) Die("the log stream ended before the job did; run the command again to resume");
  std::cerr << fmt::format("job {} {}: {}\n", id, EscapeControl(end.value("state", "?")), EscapeControl(end.value("reason", "")));
  return 0;
}

int Wait(const Connection& c, int64_t id, double timeout_s, bool quiet) {
  auto api = Connect(c);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (true) {
    // The server answers as soon as the job ends (or after `wait` seconds).
    int64_t wait_s = 25;
    if (timeout_s > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - std::chrono::steady_clock::now()).count();
      wait_s = std::clamp<int64_t>(left, 0, 25);
    }
    json job = Must(api.Get(fmt::format("/api/v1/jobs/{}?wait={}", id, wait_s)));
    std::string state = job["state"];
    if (state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED") {
      if (!quiet) std::cerr << fmt::format("job {} {}: {}\n", id, state, EscapeControl(job.value("reason", "")));
      return state == "SUCCEEDED" ? 0 : kExitFailure;
    }
    if (timeout_s > 0 && std::chrono::steady_clock::now() >= deadline) {
      Die(fmt::format("job {} is still {} after {}s (--timeout)", id, state, timeout_s));
    }
    if (wait_s == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}


int Ls(const Connection& c, bool all, bool as_json) {
  json r = Must(Connect(c).Get(std::string("/api/v1/jobs") + (all ? "?all=1" : "")));
  if (as_json) std::cout << r.dump(2) << "\n";
  else PrintJobs(r["jobs"]);
  return 0;
}

int Show(const Connection& c, int64_t id, bool as_json) {
  auto api = Connect(c);
  json r = Must(api.Get(fmt::format("/api/v1/jobs/{}", id)));
  // What the job reported (loss, accuracy, ...): the newest value of each metric.
  auto metrics = api.Get(fmt::format("/api/v1/jobs/{}/metrics?limit=0", id));
  if (metrics.ok() && !(*metrics)["latest"].empty()) r["metrics"] = (*metrics)["latest"];
  if (as_json) std::cout << r.dump(2) << "\n";
  else PrintJob(r);
  return 0;
}

int DevOpen(const Connection& c, int64_t id) {
  json job = Must(Connect(c).Get(fmt::format("/api/v1/jobs/{}", id)));
  if (!job.contains("lab_url") || !job["lab_url"].is_string()) {
    std::cerr << fmt::format("job {} is not a running notebook (kind: dev with no command); it is {}\n", id,
                             job.value("state", "?"));
    return kExitFailure;
  }
  std::string server = FindServer(c);
  while (!server.empty() && server.back() == '/') server.pop_back();
  std::cout << server << job["lab_url"].get<std::string>() << "\n";
  return 0;
}

int Cancel(const Connection& c, int64_t id, bool no_wait) {
  Must(Connect(c).Post(fmt::format("/api/v1/jobs/{}/cancel", id), json::object()));
  if (no_wait) {
    std::cerr << fmt::format("job {}: cancel requested\n", id);
    return 0;
  }
  Wait(c, id, 60, false);
  return 0;
}

int Delete(const Connection& c, int64_t id) {
  Must(Connect(c).Delete(fmt::format("/api/v1/jobs/{}", id)));
  std::cerr << fmt::format("job {} deleted\n", id);
  return 0;
}

int Nodes(const Connection& c, bool as_json) {
  json r = Must(Connect(c).Get("/api/v1/nodes"));
  if (as_json) std::cout << r.dump(2) << "\n";
  else PrintNodes(r["nodes"]);
  // On Slurm: Slurm's nodes as the server last read them; say when it could not.
  if (!as_json && r.contains("error")) std::cerr << r.value("error", "") << "\n";
  return 0;
}

int Whoami(const Connection& c) {
  json r = Must(Connect(c).Get("/api/v1/whoami"));
  std::cout << r["name"].get<std::string>() << " (" << r["role"].get<std::string>() << ", token scope "
            << r.value("scope", "?") << ")\n";
  return 0;
}

int UsersCreate(const Connection& c, const std::string& name, const std::string& role, bool password_stdin) {
  json body = {{"name", name}, {"role", role}};
  if (password_stdin) {
    std::string pw;
    std::getline(std::cin, pw);
    body["password"] = pw;
  }
  json r = Must(Connect(c).Post("/api/v1/users", body));
  std::cerr << fmt::format("user {} ({}) created; give them a token: ringmaster tokens create --user {}\n",
                           r["name"].get<std::string>(), r["role"].get<std::string>(), r["name"].get<std::string>());
  return 0;
}

int UsersLs(const Connection& c) {
  json r = Must(Connect(c).Get("/api/v1/users"));
  for (const auto& u : r["users"]) {
    std::cout << u["name"].get<std::string>() << "\t" << u["role"].get<std::string>() << "\tmax-priority "
              << u.value("max_priority", 0) << "\thost-network " << (u.value("host_network", false) ? "yes" : "no")
              << (u.value("disabled", false) ? "\tdisabled" : "") << "\n";
  }
  return 0;
}

int UsersSet(const Connection& c, const std::string& name, std::optional<int> max_priority,
             const std::string& host_network) {
  json body = json::object();
  if (max_priority) body["max_priority"] = *max_priority;
  if (host_network == "yes" || host_network == "no") body["host_network"] = host_network == "yes";
  else if (!host_network.empty()) Die(fmt::format("--host-network: \"{}\" is not yes or no", host_network));
  if (body.empty()) Die("users set: give --max-priority, --host-network or both");
  json r = Must(Connect(c).Patch(fmt::format("/api/v1/users/{}", name), body));
  std::cerr << fmt::format("user {}: max priority {}, host network {}\n", name, r.value("max_priority", 0),
                           r.value("host_network", false) ? "yes" : "no");
  return 0;
}

int UsersSetDisabled(const Connection& c, const std::string& name, bool disabled) {
  const char* verb = disabled ? "disable" : "enable";
  Must(Connect(c).Post(fmt::format("/api/v1/users/{}/{}", name, verb), json::object()));
  std::cerr << fmt::format("user {} {}d\n", name, verb);
  return 0;
}

int UsersQuota(const Connection& c, const std::string& name, const std::string& size) {
  int64_t bytes = 0;
  if (size != "none") {
    auto parsed = ParseBytes(size);
    if (!parsed || *parsed < 0) Die(fmt::format("quota: \"{}\" is not a size; use e.g. 100Gi, 500Mi, or none", size));
    bytes = *parsed;
  }
  json r = Must(Connect(c).Put(fmt::format("/api/v1/users/{}/quota", name), json{{"file_bytes", bytes}}));
  std::cerr << fmt::format("user {}: files quota {} (using {} bytes)\n", name, bytes == 0 ? "none" : size,
                           r.value("file_bytes", int64_t{0}));
  return 0;
}

int TokensCreate(const Connection& c, const std::string& user, const std::string& name, const std::string& scope,
                 const std::string& node) {
  json body = {{"name", name}};
  if (!user.empty()) body["user"] = user;
  if (!scope.empty()) body["scope"] = scope;
  if (!node.empty()) body["node"] = node;
  json r = Must(Connect(c).Post("/api/v1/tokens", body));
  std::cout << r["token"].get<std::string>() << "\n";
  return 0;
}

int TokensLs(const Connection& c, const std::string& user, bool all) {
  std::string q = all ? "?all=1" : user.empty() ? "" : "?user=" + user;
  json r = Must(Connect(c).Get("/api/v1/tokens" + q));
  for (const auto& t : r["tokens"]) {
    std::cout << t["id"].get<int64_t>() << "\t" << EscapeControl(t.value("user", "")) << "\t"
              << EscapeControl(t["name"].get<std::string>()) << "\t"
              << t.value("scope", "") << (t.contains("node") ? ":" + t["node"].get<std::string>() : "") << "\t"
              << t["created_at"].get<std::string>()
              << (t.contains("expires_at") ? "\texpires " + t["expires_at"].get<std::string>() : "") << "\n";
  }
  return 0;
}

int TokensRevoke(const Connection& c, int64_t id) {
  Must(Connect(c).Delete(fmt::format("/api/v1/tokens/{}", id)));
  std::cerr << fmt::format("token {} revoked\n", id);
  return 0;
}

int Audit(const Connection& c, const std::string& user, const std::string& action, int limit, bool as_json) {
  std::string q = fmt::format("/api/v1/audit?limit={}", limit);
  if (!user.empty()) q += "&user=" + user;
  if (!action.empty()) q += "&action=" + action;
  json r = Must(Connect(c).Get(q));
  if (as_json) {
    std::cout << r.dump(2) << "\n";
    return 0;
  }
  // Entries quote what clients sent (a failed login's name): shown escaped.
  for (const auto& e : r["entries"]) {
    const auto f = [&](const char* k) { return EscapeControl(e.value(k, "")); };
    std::cout << f("time") << "  " << f("address") << "  " << (f("user").empty() ? "-" : f("user")) << "  "
              << f("action") << "  " << f("target") << "  " << f("outcome")
              << (f("detail").empty() ? "" : "  (" + f("detail") + ")") << "\n";
  }
  return 0;
}

}  // namespace ringmaster::cli
