// The agent's side of its tasks' networks (split from agent.cc): a job's
// own namespace on this node (net::JobNetwork) for tasks off the overlay,
// and the overlay's hook, with the job's peers, for containers on it.
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>

#include <fmt/format.h>

#include "agent/agent.h"
#include "common/log.h"
#include "common/subprocess.h"

namespace ringmaster::agent {
namespace {

// The host part of "https://host:port/...".
std::string UrlHost(const std::string& url) {
  size_t start = url.find("://");
  start = start == std::string::npos ? 0 : start + 3;
  size_t end = url.find_first_of(":/", start);
  std::string host = url.substr(start, end == std::string::npos ? std::string::npos : end - start);
  return host;
}

// What a job's namespace may not reach: this node's IPv4 addresses and the
// server's (the bridge's gateway JobNetwork adds itself).
std::vector<std::string> DenyList(const std::string& server_url) {
  std::vector<std::string> out;
  if (auto addrs = RunTool({"ip", "-o", "-4", "addr", "show"}); addrs.ok()) {
    std::istringstream in(*addrs);
    for (std::string word; in >> word;) {
      if (word != "inet" || !(in >> word)) continue;
      const std::string a = word.substr(0, word.find('/'));
      if (net::ParseIpv4(a) && a.rfind("127.", 0) != 0) out.push_back(a);
    }
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(UrlHost(server_url).c_str(), nullptr, &hints, &res) == 0) {
    for (addrinfo* p = res; p; p = p->ai_next) {
      const uint32_t a = ntohl(reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_addr.s_addr);
      const std::string text = net::FormatIpv4(a);
      if (text.rfind("127.", 0) != 0) out.push_back(text);
    }
    freeaddrinfo(res);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

Status Agent::SetUpJobNetworkLocked() {
  if (job_network_) return Status::Ok();
  net::JobNetworkOptions o;
  RM_ASSIGN_OR_RETURN(o.subnet, net::ParseCidr(options_.task_subnet));
  RM_ASSIGN_OR_RETURN(o.allow, net::ParseAllowList(options_.task_allow));
  o.node_address = address_;
  o.state_dir = options_.data_dir + "/netns";
  o.deny = DenyList(options_.server_url);
  o.ephemeral_lo = options_.task_ephemeral_lo;
  o.ephemeral_hi = options_.task_ephemeral_hi;
  auto jn = std::make_unique<net::JobNetwork>(o);
  RM_RETURN_IF_ERROR(jn->Setup());
  spdlog::info("agent: each job's tasks get a network of their own ({} on {}, node address {})", net::kTaskBridge,
               options_.task_subnet, address_);
  job_network_ = std::move(jn);
  return Status::Ok();
}

void Agent::AdoptJobNetworks(const std::vector<std::pair<std::string, std::string>>& key_and_name) {
  if (options_.task_network != "isolated") return;
  net::JobNetwork* jn = nullptr;
  {
    std::lock_guard<std::mutex> l(net_mu_);
    if (Status st = SetUpJobNetworkLocked(); !st.ok()) {
      job_network_error_ = st.message();
      spdlog::error("agent: the task network: {}", job_network_error_);
      return;
    }
    jn = job_network_.get();
  }
  for (const auto& [key, path] : key_and_name) {
    if (!path.empty()) jn->Adopt(key, path.substr(path.rfind('/') + 1));
  }
  jn->Sweep();
}

std::optional<TaskExit> Agent::PrepareNetwork(const std::string& key, const protocol::Assignment& a,
                                              TaskLaunch* launch) {
  launch->network = a.network;
  if (a.network == "overlay") {
    // Its address on the container overlay: runc's hook attaches the
    // container's own network namespace to the node's bridge.
    if (launch->runtime != "runc") return TaskExit{-1, 0, "the container overlay joins runc containers, not " + launch->runtime};
    auto addr = net::ParseIpv4(a.overlay_address);
    if (!addr) return TaskExit{-1, 0, "no overlay address in the assignment"};
    std::lock_guard<std::mutex> nl(net_mu_);
    if (!overlay_) {
      return TaskExit{-1, 0, "this node's container overlay is not up" +
                                 (overlay_error_.empty() ? std::string() : ": " + overlay_error_)};
    }
    launch->network_hook = overlay_->AttachHook(options_.self_exe, key, *addr, a.peers);
    return std::nullopt;
  }
  if (a.network != "job") return std::nullopt;  // host (granted, or a server one release back) or none
  launch->network = "host";
  if (options_.task_network != "isolated") return std::nullopt;
  if (launch->runtime == "docker") {
    return TaskExit{-1, 0,
                    "this node gives every job a network of its own (agent --task-network isolated), which the docker "
                    "executor cannot join: run the job with executor: runc, or (if an admin grants it) network: host"};
  }
  int port = 0;
  if (auto p = a.env.find("RINGMASTER_PORT"); p != a.env.end()) port = std::atoi(p->second.c_str());
  net::JobNetwork* jn = nullptr;
  {
    std::lock_guard<std::mutex> nl(net_mu_);
    if (Status st = SetUpJobNetworkLocked(); !st.ok()) {
      job_network_error_ = st.message();
      return TaskExit{-1, 0, "this node's task network is not up: " + job_network_error_};
    }
    jn = job_network_.get();  // once made, it lives as long as the agent
  }
  // One namespace per generation of the gang (RINGMASTER_GENERATION, its
  // highest attempt), not per task attempt: a worker an elastic job grows by
  // starts at attempt 1 beside ranks on their second, and must meet them.
  int generation = a.attempt;
  if (auto g = a.env.find("RINGMASTER_GENERATION"); g != a.env.end()) generation = std::atoi(g->second.c_str());
  // Without net_mu_: JobNetwork is thread-safe, and other jobs' namespaces
  // are made at the same time.
  auto path = jn->Join(a.job_id, generation, key, port, a.peers);
  if (!path.ok()) return TaskExit{-1, 0, "joining the job's network on this node: " + path.status().message()};
  launch->network = "job";
  launch->netns = *path;
  return std::nullopt;
}

void Agent::Detach(const std::string& key) {
  net::JobNetwork* jn = nullptr;
  {
    std::lock_guard<std::mutex> l(net_mu_);
    jn = job_network_.get();
    if (overlay_) overlay_->Detach(key);
  }
  if (jn) jn->Leave(key);
}

}  // namespace ringmaster::agent
