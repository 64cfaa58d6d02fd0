#include "net/job_network.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/files.h"
#include "common/log.h"

namespace ringmaster::net {
namespace {

uint32_t Gateway(const Ipv4Net& subnet) { return subnet.addr + 1; }

}  // namespace

JobNetwork::JobNetwork(JobNetworkOptions options, ToolRunner run) : o_(std::move(options)), run_(std::move(run)) {
  if (o_.host_pid == 0) o_.host_pid = getpid();
}

std::string JobNetwork::Name(int64_t job, int attempt) { return fmt::format("rmj-{}-{}", job, attempt); }

std::string JobNetwork::VethName(const std::string& path) { return "rj" + Sha256Hex(path).substr(0, 13); }

bool JobNetwork::Claim(const std::string& what, int64_t index, const std::string& path) {
  const std::string file = fmt::format("{}/{}-{}", o_.registry_dir, what, index);
  for (int tries = 0; tries < 2; ++tries) {
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
      const bool ok = ::write(fd, path.data(), path.size()) == static_cast<ssize_t>(path.size());
      ::close(fd);
      return ok;
    }
    if (errno != EEXIST) return false;
    // Held: by a namespace that is still there, or left by one that is gone.
    auto holder = ReadFile(file);
    if (holder.ok() && *holder == path) return true;
    if (holder.ok() && !holder->empty() && ::access(holder->c_str(), F_OK) == 0) return false;
    ::unlink(file.c_str());
  }
  return false;
}

void JobNetwork::Unclaim(const std::string& what, int64_t index, const std::string& path) {
  const std::string file = fmt::format("{}/{}-{}", o_.registry_dir, what, index);
  if (auto holder = ReadFile(file); holder.ok() && *holder == path) ::unlink(file.c_str());
}

std::pair<int, int> JobNetwork::BlockPorts(int block) const {
  const int lo = o_.ephemeral_lo + block * o_.ephemeral_block;
  return {lo, lo + o_.ephemeral_block - 1};
}

Status JobNetwork::Setup() {
  if (!ParseIpv4(o_.node_address)) return InvalidArgument("task network: the node's address \"" + o_.node_address + "\" is not IPv4");
  if (o_.subnet.prefix > 30) return InvalidArgument("--task-subnet: " + FormatCidr(o_.subnet) + " is too small");
  if (o_.ephemeral_block < 16 || o_.ephemeral_hi - o_.ephemeral_lo + 1 < o_.ephemeral_block) {
    return InvalidArgument("task network: no room for one ephemeral port block");
  }
  const std::string gw = fmt::format("{}/{}", FormatIpv4(Gateway(o_.subnet)), o_.subnet.prefix);
  if (!run_({"ip", "link", "show", kTaskBridge}).ok()) {
    RM_RETURN_IF_ERROR(run_({"ip", "link", "add", kTaskBridge, "type", "bridge"}).status());
  }
  RM_RETURN_IF_ERROR(run_({"ip", "addr", "replace", gw, "dev", kTaskBridge}).status());
  // No IPv6 on the bridge: a link-local address would let tasks reach the host's services.
  (void)run_({"sysctl", "-q", "-w", fmt::format("net.ipv6.conf.{}.disable_ipv6=1", kTaskBridge)});
  RM_RETURN_IF_ERROR(run_({"ip", "link", "set", kTaskBridge, "up"}).status());
  RM_RETURN_IF_ERROR(run_({"sysctl", "-q", "-w", "net.ipv4.ip_forward=1"}).status());
  // Declared (kept with its map's elements: running jobs' forwarded ports
  // survive an agent restart), then its rules written afresh.
  const std::string subnet = FormatCidr(o_.subnet), t = kTaskTable;
  std::string s = fmt::format(
      "table ip {0} {{\n"
      "  set nodes {{ type ipv4_addr; }}\n"
      "  map ports {{ type inet_proto . inet_service : ipv4_addr; flags interval; }}\n"
      "  chain prerouting {{ type nat hook prerouting priority -100; policy accept; }}\n"
      "  chain postrouting {{ type nat hook postrouting priority 100; policy accept; }}\n"
      "  chain input {{ type filter hook input priority 0; policy accept; }}\n"
      "}}\n"
      "flush chain ip {0} prerouting\nflush chain ip {0} postrouting\nflush chain ip {0} input\n"
      // Rules that do not depend on the agent: several agents on one host
      // (tests) write the same, each adding its address to the set.
      "add element ip {0} nodes {{ {1} }}\n"
      "add rule ip {0} prerouting ip daddr @nodes dnat ip to meta l4proto . th dport map @ports\n"
      "add rule ip {0} postrouting ip saddr {2} ip daddr != {2} masquerade\n"
      // The host takes nothing from its tasks' namespaces but replies.
      "add rule ip {0} input iifname \"{3}\" ct state established,related accept\n"
      "add rule ip {0} input iifname \"{3}\" drop\n",
      t, o_.node_address, subnet, kTaskBridge);
  RM_RETURN_IF_ERROR(MakeDirs(o_.state_dir, 0700));
  RM_RETURN_IF_ERROR(MakeDirs(o_.registry_dir, 0700));
  const std::string script = o_.state_dir + "/host.nft";
  RM_RETURN_IF_ERROR(WriteFileAtomic(script, s, 0600));
  Status st = run_({"nft", "-f", script}).status();
  ::unlink(script.c_str());
  if (!st.ok()) return Internal("task network: the node's nftables table: " + st.message());
  // A host whose iptables drops what it forwards (Docker sets FORWARD's
  // policy to DROP) lets the tasks' traffic through; no iptables, no need.
  for (const char* dir : {"-i", "-o"}) {
    if (!run_({"iptables", "-w", "-C", "FORWARD", dir, kTaskBridge, "-j", "ACCEPT"}).ok()) {
      (void)run_({"iptables", "-w", "-I", "FORWARD", dir, kTaskBridge, "-j", "ACCEPT"});
    }
  }
  // The namespaces' bind mounts live in a private mount of their own, as
  // `ip netns` keeps /run/netns: mounts there never propagate (or loop).
  if (!run_({"mountpoint", "-q", o_.state_dir}).ok()) {
    RM_RETURN_IF_ERROR(run_({"mount", "--bind", o_.state_dir, o_.state_dir}).status());
  }
  RM_RETURN_IF_ERROR(run_({"mount", "--make-private", o_.state_dir}).status());
  {
    std::lock_guard<std::mutex> l(mu_);
    mounted_ = true;
  }
  std::vector<std::string> names;
  if (DIR* d = opendir(o_.state_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.rfind("rmj-", 0) == 0 && n.find('.') == std::string::npos) names.push_back(n);
    }
    closedir(d);
  }
  std::lock_guard<std::mutex> l(mu_);
  for (const std::string& n : names) {
    if (!nets_.count(n)) Recover(n);
  }
  return Status::Ok();
}

void JobNetwork::Recover(const std::string& name) {
  Namespace ns;
  ns.path = o_.state_dir + "/" + name;
  ns.recovered = true;
  const std::vector<std::string> in_ns = {"nsenter", "--net=" + ns.path, "--"};
  auto with = [&](std::vector<std::string> argv) {
    argv.insert(argv.begin(), in_ns.begin(), in_ns.end());
    return run_(argv);
  };
  std::string word;
  if (auto addr = with({"ip", "-o", "-4", "addr", "show", "dev", "eth0"}); addr.ok()) {
    std::istringstream in(*addr);
    while (in >> word) {
      if (word == "inet" && in >> word) {
        if (auto a = ParseIpv4(word.substr(0, word.find('/')))) ns.address = *a;
      }
    }
  }
  if (auto range = with({"sysctl", "-n", "net.ipv4.ip_local_port_range"}); range.ok()) {
    std::istringstream in(*range);
    int lo = 0;
    if (in >> lo && lo >= o_.ephemeral_lo) ns.block = (lo - o_.ephemeral_lo) / o_.ephemeral_block;
  }
  if (ns.address == 0 || ns.block < 0) {
    spdlog::warn("task network: {} is not one of ours any more; removed", name);
    Remove(name, ns);
    return;
  }
  nets_.emplace(name, std::move(ns));
}

void JobNetwork::Adopt(const std::string& key, const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = nets_.find(name);
  if (it == nets_.end()) return;
  it->second.keys.insert(key);
  owner_[key] = name;
}

void JobNetwork::Sweep() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = nets_.begin(); it != nets_.end();) {
    if (!it->second.keys.empty()) {
      ++it;
      continue;
    }
    spdlog::info("task network: {} has no task left; removed", it->first);
    Remove(it->first, it->second);
    it = nets_.erase(it);
  }
}

Status JobNetwork::Forward(const char* op, const std::string& ports, std::optional<uint32_t> address) {
  const std::string to = address ? " : " + FormatIpv4(*address) : "";
  return run_({"nft", op, "element", "ip", kTaskTable, "ports", fmt::format("{{ tcp . {0}{1}, udp . {0}{1} }}", ports, to)})
      .status();
}

Status JobNetwork::Filter(const Namespace& ns) {
  FilterRules rules;
  rules.peers.assign(ns.peers.begin(), ns.peers.end());
  rules.deny = o_.deny;
  rules.deny.push_back(FormatIpv4(Gateway(o_.subnet)));
  rules.allow = o_.allow;
  rules.own = FormatIpv4(ns.address);
  rules.node = o_.node_address;
  return ApplyFilter(ns.path, rules, ns.path + ".nft", run_);
}

StatusOr<JobNetwork::Namespace> JobNetwork::Create(const std::string& name) {
  Namespace ns;
  ns.path = o_.state_dir + "/" + name;
  // The lowest free address and port block, here and in the registry.
  std::set<uint32_t> used_addrs;
  std::set<int> used_blocks;
  for (const auto& [n, other] : nets_) {
    used_addrs.insert(other.address);
    used_blocks.insert(other.block);
  }
  for (int i = 2; !ns.address; ++i) {
    auto a = TaskAddress(o_.subnet, i);
    if (!a) return ResourceExhausted("task network: no free address in " + FormatCidr(o_.subnet));
    if (!used_addrs.count(*a) && Claim("addr", *a, ns.path)) ns.address = *a;
  }
  const int blocks = (o_.ephemeral_hi - o_.ephemeral_lo + 1) / o_.ephemeral_block;
  for (int b = 0; b < blocks && ns.block < 0; ++b) {
    if (!used_blocks.count(b) && Claim("ports", BlockPorts(b).first, ns.path)) ns.block = b;
  }
  if (ns.block < 0) {
    Unclaim("addr", ns.address, ns.path);
    return ResourceExhausted(fmt::format("task network: all {} ephemeral port blocks are in use", blocks));
  }
  const std::string veth = VethName(ns.path), addr = FormatIpv4(ns.address);
  const std::string net = "--net=" + ns.path;
  auto in_ns = [&](std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"nsenter", net, "--"});
    return run_(argv).status();
  };
  // A leftover of an attempt that failed half-way.
  (void)run_({"umount", ns.path});
  (void)run_({"ip", "link", "del", veth});
  RM_RETURN_IF_ERROR(WriteFileAtomic(ns.path, "", 0600));
  RM_RETURN_IF_ERROR(run_({"unshare", net, "true"}).status());
  RM_RETURN_IF_ERROR(in_ns({"ip", "link", "add", "eth0", "type", "veth", "peer", "name", veth, "netns",
                            std::to_string(o_.host_pid)}));
  RM_RETURN_IF_ERROR(run_({"ip", "link", "set", veth, "master", kTaskBridge, "up"}).status());
  RM_RETURN_IF_ERROR(in_ns({"ip", "link", "set", "lo", "up"}));
  RM_RETURN_IF_ERROR(in_ns({"ip", "addr", "add", o_.node_address + "/32", "dev", "lo"}));
  RM_RETURN_IF_ERROR(in_ns({"ip", "addr", "add", fmt::format("{}/{}", addr, o_.subnet.prefix), "dev", "eth0"}));
  RM_RETURN_IF_ERROR(in_ns({"ip", "link", "set", "eth0", "up"}));
  RM_RETURN_IF_ERROR(in_ns({"ip", "route", "add", "default", "via", FormatIpv4(Gateway(o_.subnet)), "src", addr}));
  const auto [lo, hi] = BlockPorts(ns.block);
  RM_RETURN_IF_ERROR(in_ns({"sysctl", "-q", "-w", fmt::format("net.ipv4.ip_local_port_range={} {}", lo, hi)}));
  RM_RETURN_IF_ERROR(Filter(ns));
  (void)Forward("delete", fmt::format("{}-{}", lo, hi), std::nullopt);  // as for a task's port (Join)
  RM_RETURN_IF_ERROR(Forward("add", fmt::format("{}-{}", lo, hi), ns.address));
  spdlog::info("task network: {} at {} (ports {}-{} forwarded)", name, addr, lo, hi);
  return ns;
}

StatusOr<std::string> JobNetwork::Join(int64_t job, int attempt, const std::string& key, int port,
                                       const std::vector<std::string>& peers) {
  std::lock_guard<std::mutex> l(mu_);
  const std::string name = Name(job, attempt);
  if (auto o = owner_.find(key); o != owner_.end() && o->second != name) {
    return FailedPrecondition(fmt::format("task {} is in {} already", key, o->second));
  }
  auto it = nets_.find(name);
  if (it == nets_.end()) {
    auto made = Create(name);
    if (!made.ok()) {
      Namespace partial;
      partial.path = o_.state_dir + "/" + name;
      Remove(name, partial);
      return made.status();
    }
    it = nets_.emplace(name, std::move(*made)).first;
  }
  Namespace& ns = it->second;
  const size_t before = ns.peers.size();
  ns.peers.insert(peers.begin(), peers.end());
  if (ns.peers.size() != before) RM_RETURN_IF_ERROR(Filter(ns));
  ns.keys.insert(key);
  owner_[key] = name;
  if (port > 0 && !ns.ports.count(key)) {
    // The server hands a port of this node to one task at a time: one still
    // forwarded is a leftover of an agent that ended uncleanly.
    (void)Forward("delete", std::to_string(port), std::nullopt);
    RM_RETURN_IF_ERROR(Forward("add", std::to_string(port), ns.address));
    ns.ports[key] = port;
  }
  return ns.path;
}

void JobNetwork::Remove(const std::string& name, Namespace& ns) {
  if (ns.recovered && ns.address != 0) {
    // Every port still forwarded to it (its tasks' ports are not known here).
    static const std::regex kElement(R"(((?:tcp|udp) \. [0-9]+(?:-[0-9]+)?) : ([0-9.]+))");
    auto map = run_({"nft", "list", "map", "ip", kTaskTable, "ports"});
    const std::string text = map.ok() ? *map : "", addr = FormatIpv4(ns.address);
    for (std::sregex_iterator m(text.begin(), text.end(), kElement), end; m != end; ++m) {
      if ((*m)[2] == addr) {
        (void)run_({"nft", "delete", "element", "ip", kTaskTable, "ports", fmt::format("{{ {} : {} }}", (*m)[1].str(), addr)});
      }
    }
  } else if (ns.block >= 0) {
    const auto [lo, hi] = BlockPorts(ns.block);
    (void)Forward("delete", fmt::format("{}-{}", lo, hi), ns.address);
  }
  // The namespace ends with its last process and this mount; its veth with it.
  (void)run_({"umount", ns.path});
  ::unlink(ns.path.c_str());
  (void)run_({"ip", "link", "del", VethName(ns.path)});
  if (ns.address != 0) Unclaim("addr", ns.address, ns.path);
  if (ns.block >= 0) Unclaim("ports", BlockPorts(ns.block).first, ns.path);
}

JobNetwork::~JobNetwork() {
  std::lock_guard<std::mutex> l(mu_);
  if (!nets_.empty() || !mounted_) return;
  (void)run_({"umount", o_.state_dir});
}

void JobNetwork::Leave(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  auto o = owner_.find(key);
  if (o == owner_.end()) return;
  auto it = nets_.find(o->second);
  owner_.erase(o);
  if (it == nets_.end()) return;
  Namespace& ns = it->second;
  if (auto p = ns.ports.find(key); p != ns.ports.end()) {
    (void)Forward("delete", std::to_string(p->second), ns.address);
    ns.ports.erase(p);
  }
  ns.keys.erase(key);
  if (!ns.keys.empty()) return;
  Remove(it->first, ns);
  spdlog::info("task network: {} removed", it->first);
  nets_.erase(it);
}

}  // namespace ringmaster::net
