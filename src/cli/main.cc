// The `ringmaster` command: runs the server, the agent or both (`up`), and
// is the user's client of the REST API (submit, ls, show, logs, cancel,
// wait, nodes, users, tokens). Errors print one line to stderr and exit 2;
// `wait` exits 1 when the job failed or was cancelled.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "agent/agent.h"
#include "agent/process_executor.h"
#include "cli/output.h"
#include "client/api_client.h"
#include "common/files.h"
#include "common/log.h"
#include "common/units.h"
#include "scheduler/scheduler.h"
#include "server/server.h"

namespace ringmaster::cli {
namespace {

using nlohmann::json;

constexpr int kExitFailure = 1;  // `wait`: the job failed or was cancelled
constexpr int kExitError = 2;    // the command itself could not do its work

[[noreturn]] void Die(const std::string& message) {
  std::cerr << "ringmaster: " << message << "\n";
  std::exit(kExitError);
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string DefaultDataDir() {
  if (const char* d = getenv("RINGMASTER_DATA")) return d;
  const char* home = getenv("HOME");
  return std::string(home ? home : "/root") + "/.ringmaster";
}

std::string SelfExe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("ringmaster") : p.string();
}

struct Connection {
  std::string server;
  std::string token;
  std::string data;
};

// --server/--token flags, else RINGMASTER_SERVER/RINGMASTER_TOKEN, else the
// files `ringmaster up` wrote into its data dir (--data, RINGMASTER_DATA, ~/.ringmaster).
client::ApiClient Connect(const Connection& c) {
  std::string server = c.server, token = c.token;
  std::string data = c.data.empty() ? DefaultDataDir() : c.data;
  if (server.empty()) {
    if (const char* s = getenv("RINGMASTER_SERVER")) server = s;
  }
  if (server.empty()) {
    auto info = ReadFile(data + "/server.json");
    if (info.ok()) {
      try {
        server = json::parse(*info).at("url");
      } catch (...) {
      }
    }
  }
  if (server.empty()) {
    Die(fmt::format("no server given: pass --server URL, set RINGMASTER_SERVER, or start one with "
                    "`ringmaster up --data {}`",
                    data));
  }
  if (token.empty()) {
    if (const char* t = getenv("RINGMASTER_TOKEN")) token = t;
  }
  if (token.empty()) {
    auto t = ReadFile(data + "/admin.token");
    if (t.ok()) token = Trim(*t);
  }
  if (token.empty()) Die("no token given: pass --token, or set RINGMASTER_TOKEN");
  return client::ApiClient(server, token);
}

json Must(const StatusOr<json>& r) {
  if (!r.ok()) Die(r.status().message());
  return *r;
}

// ---- up / server / agent

void BlockStopSignals(sigset_t* set) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, set, nullptr);
}

int WaitForStopSignal(const sigset_t& set) {
  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("received {}, shutting down (running tasks keep running)", sig == SIGINT ? "SIGINT" : "SIGTERM");
  return 0;
}

struct NodeFlags {
  std::string name;
  std::string cpus;
  std::string memory;
  std::string address;
  std::string ports = "41000-41999";
  std::vector<std::string> labels;  // key=value
};

agent::AgentOptions MakeAgentOptions(const NodeFlags& f, const std::string& server, const std::string& token,
                                     const std::string& data) {
  agent::AgentOptions o;
  o.server_url = server;
  o.token = token;
  o.data_dir = data;
  o.node_name = f.name;
  if (!f.cpus.empty()) {
    auto c = ParseCpuMilli(f.cpus);
    if (!c || *c <= 0) Die("--cpus: \"" + f.cpus + "\" is not a CPU count (e.g. 4 or 0.5)");
    o.cpu_milli = *c;
  }
  o.address = f.address;
  for (const std::string& kv : f.labels) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) Die("--label: \"" + kv + "\" is not key=value (e.g. rack=r1)");
    o.labels[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (sscanf(f.ports.c_str(), "%d-%d", &o.port_lo, &o.port_hi) != 2 || o.port_lo < 1 || o.port_hi > 65535 ||
      o.port_lo > o.port_hi) {
    Die("--ports: \"" + f.ports + "\" is not a port range like 41000-41999");
  }
  if (!f.memory.empty()) {
    auto m = ParseBytes(f.memory);
    if (!m || *m <= 0) Die("--memory: \"" + f.memory + "\" is not a size (e.g. 8Gi)");
    o.memory_bytes = *m;
  }
  return o;
}

std::unique_ptr<agent::Agent> MakeAgent(const agent::AgentOptions& o) {
  if (auto st = MakeDirs(o.data_dir, 0700); !st.ok()) Die(st.message());
  return std::make_unique<agent::Agent>(o, std::make_unique<agent::ProcessExecutor>(o.data_dir, SelfExe()));
}

struct SchedulerFlags {
  std::string policy = "priority";
  std::string scores;               // "binpack=1,locality=1"
  std::vector<std::string> quotas;  // "alice:gpus=4,cpus=16,borrow=no"
  bool no_preemption = false;
  bool heterogeneity_aware = false;
  double scale_up_below = 0.7;
  double scale_down_above = 0.9;
};

// The scheduler's configuration from flags; a bad flag dies with one line.
scheduler::SchedulerConfig MakeSchedulerConfig(const SchedulerFlags& f) {
  scheduler::SchedulerConfig c;
  c.policy = f.policy;
  c.preemption = !f.no_preemption;
  c.heterogeneity_aware = f.heterogeneity_aware;
  if (!f.scores.empty()) {
    c.scores.clear();
    std::stringstream ss(f.scores);
    for (std::string item; std::getline(ss, item, ',');) {
      const size_t eq = item.find('=');
      double w = 1;
      if (eq != std::string::npos) {
        char* end = nullptr;
        w = std::strtod(item.c_str() + eq + 1, &end);
        if (end == item.c_str() + eq + 1 || *end != '\0') Die("--scores: \"" + item + "\" is not name=weight (e.g. binpack=1)");
      }
      c.scores.push_back({item.substr(0, eq), w});
    }
  }
  for (const std::string& q : f.quotas) {
    const size_t colon = q.find(':');
    if (colon == std::string::npos || colon == 0) Die("--quota: \"" + q + "\" is not user:gpus=N,cpus=N[,borrow=no]");
    scheduler::Quota quota;
    std::stringstream ss(q.substr(colon + 1));
    for (std::string item; std::getline(ss, item, ',');) {
      const size_t eq = item.find('=');
      const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
      if (key == "gpus") {
        char* end = nullptr;
        long v = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || v < 0) Die("--quota: gpus=\"" + value + "\" is not a GPU count");
        quota.gpus = static_cast<int>(v);
      } else if (key == "cpus") {
        auto milli = ParseCpuMilli(value);
        if (!milli || *milli < 0) Die("--quota: cpus=\"" + value + "\" is not a CPU quantity (e.g. 16 or 500m)");
        quota.cpu_milli = *milli;
      } else if (key == "borrow" && (value == "yes" || value == "no")) {
        quota.borrow = value == "yes";
      } else {
        Die("--quota: \"" + item + "\" is not gpus=N, cpus=N or borrow=yes|no");
      }
    }
    c.quotas[q.substr(0, colon)] = quota;
  }
  auto made = scheduler::Scheduler::Create(c);
  if (!made.ok()) Die("scheduler: " + made.status().message());
  return c;
}

int RunUp(const std::string& data_in, const std::string& host, int port, const NodeFlags& node,
          const SchedulerFlags& sched, bool with_agent) {
  sigset_t set;
  BlockStopSignals(&set);
  std::string data = std::filesystem::absolute(data_in.empty() ? DefaultDataDir() : data_in).string();
  server::ServerOptions so;
  so.data_dir = data;
  so.host = host;
  so.port = port;
  so.jobs.scheduler = MakeSchedulerConfig(sched);
  so.jobs.elastic_scale_up_below = sched.scale_up_below;
  so.jobs.elastic_scale_down_above = sched.scale_down_above;
  server::Server srv(so);
  if (auto st = srv.Start(); !st.ok()) Die(st.message());
  std::unique_ptr<agent::Agent> agent;
  if (with_agent) {
    auto token = ReadFile(srv.admin_token_path());
    if (!token.ok()) Die("cannot read " + srv.admin_token_path() + ": delete the data dir or restore the file");
    NodeFlags local = node;
    // One machine: tasks meet where the server listens (unless it listens everywhere).
    if (local.address.empty() && host != "0.0.0.0") local.address = host;
    agent = MakeAgent(MakeAgentOptions(local, srv.url(), Trim(*token), data + "/agent"));
    agent->Start();
    std::cerr << fmt::format("ringmaster is up at {} with a local agent; data in {}\n"
                             "  try: ringmaster --data {} submit examples/hello.yaml\n",
                             srv.url(), data, data);
  }
  WaitForStopSignal(set);
  if (agent) agent->Stop();
  srv.Stop();
  return 0;
}

int RunAgent(const std::string& server, const std::string& token_file, const std::string& data_in,
             const NodeFlags& node) {
  sigset_t set;
  BlockStopSignals(&set);
  auto token = ReadFile(token_file);
  if (!token.ok()) Die("--token-file: cannot read " + token_file);
  std::string data = std::filesystem::absolute(data_in.empty() ? DefaultDataDir() + "/agent" : data_in).string();
  auto agent = MakeAgent(MakeAgentOptions(node, server, Trim(*token), data));
  agent->Start();
  WaitForStopSignal(set);
  agent->Stop();
  return 0;
}

// ---- client commands

std::string ReadSpec(const std::string& file) {
  if (file == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  auto text = ReadFile(file);
  if (!text.ok()) Die("cannot read " + file);
  return *text;
}

// Like sbatch: a job without working_dir runs where it was submitted from.
std::string WithWorkingDir(const std::string& text) {
  try {
    YAML::Node root = YAML::Load(text);
    if (!root.IsMap() || root["working_dir"]) return text;
    root["working_dir"] = std::filesystem::current_path().string();
    YAML::Emitter out;
    out << root;
    return out.c_str();
  } catch (...) {
    return text;  // the server reports what is wrong with it
  }
}

int Submit(const Connection& c, const std::string& file, bool no_workdir) {
  std::string text = ReadSpec(file);
  if (!no_workdir) text = WithWorkingDir(text);
  auto res = Connect(c).PostText("/api/v1/jobs", text, "application/yaml");
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
  Status st = api.Stream(path + "?follow=1" + (q.empty() ? "" : "&" + q), [&](const char* d, size_t n) {
    buf.append(d, n);
    size_t start = 0, nl;
    while ((nl = buf.find('\n', start)) != std::string::npos) {
      json rec = json::parse(buf.substr(start, nl - start), nullptr, false);
      start = nl + 1;
      if (rec.is_discarded()) continue;
      if (rec.contains("line")) {
        std::cout << "[" << rec["rank"].get<int>() << "] " << rec["line"].get<std::string>() << "\n";
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
  std::cerr << fmt::format("job {} {}: {}\n", id, end.value("state", "?"), end.value("reason", ""));
  return 0;
}

int Wait(const Connection& c, int64_t id, double timeout_s, bool quiet) {
  auto api = Connect(c);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (true) {
    json job = Must(api.Get(fmt::format("/api/v1/jobs/{}", id)));
    std::string state = job["state"];
    if (state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED") {
      if (!quiet) std::cerr << fmt::format("job {} {}: {}\n", id, state, job.value("reason", ""));
      return state == "SUCCEEDED" ? 0 : kExitFailure;
    }
    if (timeout_s > 0 && std::chrono::steady_clock::now() >= deadline) {
      Die(fmt::format("job {} is still {} after {}s (--timeout)", id, state, timeout_s));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
}

}  // namespace

int Main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "shim") return agent::RunShim(argv[2]);

  CLI::App app{"ringmaster: a distributed deep-learning platform"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (--data, --server, --token) may follow the subcommand
  Connection conn;
  bool verbose = false;
  app.add_option("--server", conn.server, "server URL (default: $RINGMASTER_SERVER, else <data>/server.json)");
  app.add_option("--token", conn.token, "API token (default: $RINGMASTER_TOKEN, else <data>/admin.token)");
  app.add_option("--data", conn.data, "the data dir of `ringmaster up` (default: $RINGMASTER_DATA or ~/.ringmaster)");
  app.add_flag("-v,--verbose", verbose, "debug logging");

  std::string host = "127.0.0.1";
  int port = 8080;
  NodeFlags node;
  auto add_node_flags = [&](CLI::App* cmd) {
    cmd->add_option("--node-name", node.name, "node name (default: hostname)");
    cmd->add_option("--cpus", node.cpus, "CPUs to offer (default: all)");
    cmd->add_option("--memory", node.memory, "memory to offer, e.g. 8Gi (default: all)");
    cmd->add_option("--address", node.address, "address other nodes reach tasks here at (default: this host's)");
    cmd->add_option("--ports", node.ports, "ports the platform may give tasks here")->capture_default_str();
    cmd->add_option("--label", node.labels, "a node label key=value that jobs' node_selector can match; repeatable");
  };
  SchedulerFlags sched;
  auto add_scheduler_flags = [&](CLI::App* cmd) {
    cmd->add_option("--policy", sched.policy, "queue policy: fifo, priority, backfill or las")->capture_default_str();
    cmd->add_option("--scores", sched.scores,
                    "score plugins and weights (default binpack=1,locality=1,load-aware=0.5; also spread)");
    cmd->add_option("--quota", sched.quotas, "a user's guaranteed share, e.g. alice:gpus=4,cpus=16[,borrow=no]; repeatable");
    cmd->add_flag("--no-preemption", sched.no_preemption, "never preempt running jobs");
    cmd->add_flag("--heterogeneity-aware", sched.heterogeneity_aware,
                  "place jobs with gpu_throughput on their fastest GPU type with room");
    cmd->add_option("--elastic-scale-up-below", sched.scale_up_below,
                    "elastic jobs grow while nothing waits and the cluster is less allocated than this")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    cmd->add_option("--elastic-scale-down-above", sched.scale_down_above,
                    "above this allocated share, elastic workers beyond min yield to equal-priority jobs too")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
  };
  auto* up = app.add_subcommand("up", "run a server and a local agent (one machine, SQLite + local files)");
  up->add_option("--port", port, "HTTP port (0 = any free port)")->capture_default_str();
  up->add_option("--host", host, "address to listen on")->capture_default_str();
  add_node_flags(up);
  add_scheduler_flags(up);
  auto* server_cmd = app.add_subcommand("server", "run the server alone");
  server_cmd->add_option("--port", port, "HTTP port (0 = any free port)")->capture_default_str();
  server_cmd->add_option("--host", host, "address to listen on")->capture_default_str();
  add_scheduler_flags(server_cmd);
  auto* agent_cmd = app.add_subcommand("agent", "run an agent that serves a server");
  std::string token_file;
  agent_cmd->add_option("--token-file", token_file, "file holding an admin token")->required();
  add_node_flags(agent_cmd);

  auto* submit = app.add_subcommand("submit", "submit a job spec (YAML or JSON; - for stdin); prints the job id");
  std::string spec_file;
  bool no_workdir = false;
  submit->add_option("file", spec_file, "job spec")->required();
  submit->add_flag("--no-workdir", no_workdir, "do not default working_dir to the current directory");

  int64_t job_id = 0;
  bool as_json = false, all = false;
  auto* ls = app.add_subcommand("ls", "list your jobs");
  ls->add_flag("--json", as_json, "print JSON");
  ls->add_flag("-a,--all", all, "every user's jobs (admins)");
  auto* show = app.add_subcommand("show", "show a job: state, reasons, tasks and events");
  show->add_option("id", job_id, "job id")->required();
  show->add_flag("--json", as_json, "print JSON");
  auto* logs = app.add_subcommand("logs", "print a job's logs, each line prefixed by its task's rank");
  bool follow = false;
  int rank = -1;
  logs->add_option("id", job_id, "job id")->required();
  logs->add_flag("-f,--follow", follow, "stream until the job ends");
  logs->add_option("--rank", rank, "only this rank");
  auto* cancel = app.add_subcommand("cancel", "cancel a job and wait until its tasks are gone");
  bool no_wait = false;
  double timeout_s = 0;
  cancel->add_option("id", job_id, "job id")->required();
  cancel->add_flag("--no-wait", no_wait, "return once the request is accepted");
  auto* del = app.add_subcommand("delete", "delete an ended job with its logs");
  del->add_option("id", job_id, "job id")->required();
  auto* wait = app.add_subcommand("wait", "wait for a job to end; exit 0 if it succeeded, 1 if not");
  wait->add_option("id", job_id, "job id")->required();
  wait->add_option("--timeout", timeout_s, "give up after this many seconds (exit 2)");
  auto* nodes = app.add_subcommand("nodes", "list the cluster's nodes");
  nodes->add_flag("--json", as_json, "print JSON");
  auto* whoami = app.add_subcommand("whoami", "show who the token belongs to");

  auto* users = app.add_subcommand("users", "manage users (admins)");
  users->require_subcommand(1);
  auto* users_create = users->add_subcommand("create", "create a user");
  std::string user_name, role = "user", token_name = "cli";
  bool password_stdin = false;
  users_create->add_option("name", user_name, "user name")->required();
  users_create->add_option("--role", role, "admin or user")->capture_default_str();
  users_create->add_flag("--password-stdin", password_stdin, "read a password from stdin (for `login`)");
  auto* users_ls = users->add_subcommand("ls", "list users");

  auto* tokens = app.add_subcommand("tokens", "manage API tokens");
  tokens->require_subcommand(1);
  auto* tokens_create = tokens->add_subcommand("create", "create a token; prints it alone on stdout");
  tokens_create->add_option("--user", user_name, "for this user (admins)");
  tokens_create->add_option("--name", token_name, "a label for the token")->capture_default_str();
  auto* tokens_ls = tokens->add_subcommand("ls", "list your tokens");
  auto* tokens_revoke = tokens->add_subcommand("revoke", "revoke one of your tokens");
  int64_t token_id = 0;
  tokens_revoke->add_option("id", token_id, "token id")->required();
  auto* login = app.add_subcommand("login", "exchange a user's password (on stdin) for a token");
  login->add_option("user", user_name, "user name")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitError;
  }
  InitLogging(verbose);

  if (*up) return RunUp(conn.data, host, port, node, sched, true);
  if (*server_cmd) return RunUp(conn.data, host, port, node, sched, false);
  if (*agent_cmd) {
    std::string server = conn.server;
    if (server.empty() && getenv("RINGMASTER_SERVER")) server = getenv("RINGMASTER_SERVER");
    if (server.empty()) Die("agent: --server URL is required");
    return RunAgent(server, token_file, conn.data, node);
  }
  if (*submit) return Submit(conn, spec_file, no_workdir);
  if (*logs) return Logs(conn, job_id, follow, rank);
  if (*wait) return Wait(conn, job_id, timeout_s, false);

  if (*login) {
    std::string pw;
    std::getline(std::cin, pw);
    // Only the server address is needed: the password is the credential.
    Connection anon = conn;
    if (anon.token.empty()) anon.token = "-";
    auto token = client::ApiClient::Login(Connect(anon).server_url(), user_name, pw, token_name);
    if (!token.ok()) Die("login: " + token.status().message());
    std::cout << *token << "\n";
    return 0;
  }
  auto api = Connect(conn);
  if (*ls) {
    json r = Must(api.Get(std::string("/api/v1/jobs") + (all ? "?all=1" : "")));
    if (as_json) std::cout << r.dump(2) << "\n";
    else PrintJobs(r["jobs"]);
  } else if (*show) {
    json r = Must(api.Get(fmt::format("/api/v1/jobs/{}", job_id)));
    // What the job reported (loss, accuracy, ...): the newest value of each metric.
    auto metrics = api.Get(fmt::format("/api/v1/jobs/{}/metrics", job_id));
    if (metrics.ok() && !(*metrics)["latest"].empty()) r["metrics"] = (*metrics)["latest"];
    if (as_json) std::cout << r.dump(2) << "\n";
    else PrintJob(r);
  } else if (*cancel) {
    Must(api.Post(fmt::format("/api/v1/jobs/{}/cancel", job_id), json::object()));
    if (no_wait) {
      std::cerr << fmt::format("job {}: cancel requested\n", job_id);
      return 0;
    }
    Wait(conn, job_id, 60, false);
  } else if (*del) {
    Must(api.Delete(fmt::format("/api/v1/jobs/{}", job_id)));
    std::cerr << fmt::format("job {} deleted\n", job_id);
  } else if (*nodes) {
    json r = Must(api.Get("/api/v1/nodes"));
    if (as_json) std::cout << r.dump(2) << "\n";
    else PrintNodes(r["nodes"]);
  } else if (*whoami) {
    json r = Must(api.Get("/api/v1/whoami"));
    std::cout << r["name"].get<std::string>() << " (" << r["role"].get<std::string>() << ")\n";
  } else if (*users_create) {
    json body = {{"name", user_name}, {"role", role}};
    if (password_stdin) {
      std::string pw;
      std::getline(std::cin, pw);
      body["password"] = pw;
    }
    json r = Must(api.Post("/api/v1/users", body));
    std::cerr << fmt::format("user {} ({}) created; give them a token: ringmaster tokens create --user {}\n",
                             r["name"].get<std::string>(), r["role"].get<std::string>(), r["name"].get<std::string>());
  } else if (*users_ls) {
    json r = Must(api.Get("/api/v1/users"));
    for (const auto& u : r["users"]) std::cout << u["name"].get<std::string>() << "\t" << u["role"].get<std::string>() << "\n";
  } else if (*tokens_create) {
    json body = {{"name", token_name}};
    if (!user_name.empty()) body["user"] = user_name;
    json r = Must(api.Post("/api/v1/tokens", body));
    std::cout << r["token"].get<std::string>() << "\n";
  } else if (*tokens_ls) {
    json r = Must(api.Get("/api/v1/tokens"));
    for (const auto& t : r["tokens"]) {
      std::cout << t["id"].get<int64_t>() << "\t" << t["name"].get<std::string>() << "\t" << t["created_at"].get<std::string>() << "\n";
    }
  } else if (*tokens_revoke) {
    Must(api.Delete(fmt::format("/api/v1/tokens/{}", token_id)));
  }
  return 0;
}

}  // namespace ringmaster::cli

int main(int argc, char** argv) { return ringmaster::cli::Main(argc, argv); }
