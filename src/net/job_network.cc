#include "net/job_network.h"

#include <dirent.h>
#include <fcntl.h>
#include <net/if.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/files.h"
#include "common/log.h"
#include "net/netlink.h"
#include "net/netns.h"

namespace ringmaster::net {
namespace {

uint32_t Gateway(const Ipv4Net& subnet) { return subnet.addr + 1; }

}  // namespace

JobNetwork::JobNetwork(JobNetworkOptions options, ToolRunner run) : o_(std::move(options)), run_(std::move(run)) {}

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
    std::lock_guard<std::mutex> h(host_mu_);
    if (!host_nft_) {
      RM_ASSIGN_OR_RETURN(host_nft_, Nft::Create());
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    mounted_ = true;
    bridge_ = static_cast<int>(::if_nametoindex(kTaskBridge));
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
  auto made = std::make_shared<Namespace>();
  Namespace& ns = *made;
  ns.state = Namespace::State::kReady;
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
    // One of our blocks, exactly; else the kernel's default (a job on this node alone has no block).
    int lo = 0, hi = 0;
    if (in >> lo >> hi && lo >= o_.ephemeral_lo && (lo - o_.ephemeral_lo) % o_.ephemeral_block == 0 &&
        hi == lo + o_.ephemeral_block - 1) {
      ns.block = (lo - o_.ephemeral_lo) / o_.ephemeral_block;
    }
  }
  if (ns.address == 0) {
    spdlog::warn("task network: {} is not one of ours any more; removed", name);
    Teardown(ns);
    Release(name, made);
    return;
  }
  nets_.emplace(name, made);
}

void JobNetwork::Adopt(const std::string& key, const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = nets_.find(name);
  if (it == nets_.end()) return;
  it->second->keys.insert(key);
  owner_[key] = name;
}

void JobNetwork::Sweep() {
  std::vector<std::pair<std::string, NamespacePtr>> gone;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [name, ns] : nets_) {
      if (ns->recovered && ns->keys.empty() && ns->state == Namespace::State::kReady) {
        ns->state = Namespace::State::kRemoving;
        gone.emplace_back(name, ns);
      }
    }
  }
  for (auto& [name, ns] : gone) {
    spdlog::info("task network: {} has no task left; removed", name);
    Teardown(*ns);
    std::lock_guard<std::mutex> l(mu_);
    Release(name, ns);
  }
}

FilterRules JobNetwork::Rules(const Namespace& ns) const {
  FilterRules rules;
  rules.peers.assign(ns.peers.begin(), ns.peers.end());
  rules.deny = o_.deny;
  rules.deny.push_back(FormatIpv4(Gateway(o_.subnet)));
  rules.allow = o_.allow;
  rules.own = FormatIpv4(ns.address);
  rules.node = o_.node_address;
  return rules;
}

StatusOr<std::string> JobNetwork::HostNft(const std::string& commands, const std::string& what) {
  if (!host_nft_) return FailedPrecondition("task network: not set up");
  return host_nft_->Run(commands, what);
}

Status JobNetwork::Forward(const std::string& ports, uint32_t address, const std::string& key) {
  const std::string elements = fmt::format("{{ tcp . {0} : {1}, udp . {0} : {1} }}", ports, FormatIpv4(address));
  const std::string add = fmt::format("add element ip {} ports {}", kTaskTable, elements);
  std::lock_guard<std::mutex> l(host_mu_);
  if (!key.empty()) forwarded_[ports] = key;
  // Adding what is there already succeeds; only an element left pointing
  // elsewhere (an agent that ended uncleanly) costs a delete.
  if (HostNft(add, "").ok()) return Status::Ok();
  (void)HostNft(fmt::format("delete element ip {0} ports {{ tcp . {1}, udp . {1} }}", kTaskTable, ports), "");
  return HostNft(add, "forwarding ports " + ports).status();
}

void JobNetwork::Unforward(const std::string& ports, uint32_t address, const std::string& key) {
  std::lock_guard<std::mutex> l(host_mu_);
  if (!key.empty()) {
    auto f = forwarded_.find(ports);
    if (f == forwarded_.end() || f->second != key) return;
    forwarded_.erase(f);
  }
  (void)HostNft(fmt::format("delete element ip {0} ports {{ tcp . {1} : {2}, udp . {1} : {2} }}", kTaskTable, ports,
                            FormatIpv4(address)),
                "");
}

void JobNetwork::UnforwardAll(uint32_t address) {
  static const std::regex kElement(R"(((?:tcp|udp) \. [0-9]+(?:-[0-9]+)?) : ([0-9.]+))");
  const std::string addr = FormatIpv4(address);
  std::lock_guard<std::mutex> l(host_mu_);
  auto map = HostNft(fmt::format("list map ip {} ports", kTaskTable), "listing the forwarded ports");
  const std::string text = map.ok() ? *map : "";
  std::string elements;
  for (std::sregex_iterator m(text.begin(), text.end(), kElement), end; m != end; ++m) {
    if ((*m)[2] == addr) elements += (elements.empty() ? "" : ", ") + fmt::format("{} : {}", (*m)[1].str(), addr);
  }
  if (!elements.empty()) {
    (void)HostNft(fmt::format("delete element ip {} ports {{ {} }}", kTaskTable, elements), "");
  }
}

StatusOr<JobNetwork::NamespacePtr> JobNetwork::Reserve(const std::string& name, bool block) {
  auto ns = std::make_shared<Namespace>();
  ns->path = o_.state_dir + "/" + name;
  // The lowest free address, here and in the registry.
  std::set<uint32_t> used_addrs;
  for (const auto& [n, other] : nets_) used_addrs.insert(other->address);
  for (int i = 2; !ns->address; ++i) {
    auto a = TaskAddress(o_.subnet, i);
    if (!a) return ResourceExhausted("task network: no free address in " + FormatCidr(o_.subnet));
    if (!used_addrs.count(*a) && Claim("addr", *a, ns->path)) ns->address = *a;
  }
  if (block && !ClaimBlock(*ns)) {
    Unclaim("addr", ns->address, ns->path);
    return ResourceExhausted(fmt::format("task network: all {} ephemeral port blocks are in use",
                                         (o_.ephemeral_hi - o_.ephemeral_lo + 1) / o_.ephemeral_block));
  }
  nets_.emplace(name, ns);
  return ns;
}

bool JobNetwork::ClaimBlock(Namespace& ns) {
  std::set<int> used;
  for (const auto& [n, other] : nets_) used.insert(other->block);
  const int blocks = (o_.ephemeral_hi - o_.ephemeral_lo + 1) / o_.ephemeral_block;
  for (int b = 0; b < blocks; ++b) {
    if (!used.count(b) && Claim("ports", BlockPorts(b).first, ns.path)) {
      ns.block = b;
      return true;
    }
  }
  return false;
}

Status JobNetwork::OpenBlock(const Namespace& ns) {
  const auto [lo, hi] = BlockPorts(ns.block);
  // /proc/sys/net is the namespace's of the thread that opens it.
  RM_RETURN_IF_ERROR(InNamespace(
      ns.path, [&] { return WriteSysctl("net/ipv4/ip_local_port_range", fmt::format("{} {}", lo, hi)); }));
  return Forward(fmt::format("{}-{}", lo, hi), ns.address, "");
}

Status JobNetwork::Build(const Namespace& ns, int bridge, const FilterRules& rules) {
  const std::string veth = VethName(ns.path);
  RM_ASSIGN_OR_RETURN(RtNetlink host, RtNetlink::Open());
  // A leftover of an attempt that failed half-way.
  ::umount2(ns.path.c_str(), MNT_DETACH);
  (void)host.DeleteLink(veth);
  const int fd = ::open(ns.path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Internal(fmt::format("task network: creating {}: {}", ns.path, std::strerror(errno)));
  ::close(fd);
  RM_RETURN_IF_ERROR(InNewNamespace(ns.path, [&]() -> Status {
    const int self = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self < 0) return Internal(fmt::format("opening the new namespace: {}", std::strerror(errno)));
    Status st = host.AddVeth(veth, bridge, "eth0", self);
    ::close(self);
    RM_RETURN_IF_ERROR(st);
    RM_ASSIGN_OR_RETURN(RtNetlink in, RtNetlink::Open());
    RM_RETURN_IF_ERROR(in.SetUp("lo"));
    RM_RETURN_IF_ERROR(in.AddAddress(::if_nametoindex("lo"), *ParseIpv4(o_.node_address), 32));
    RM_RETURN_IF_ERROR(in.AddAddress(::if_nametoindex("eth0"), ns.address, o_.subnet.prefix));
    RM_RETURN_IF_ERROR(in.SetUp("eth0"));
    RM_RETURN_IF_ERROR(in.AddDefaultRoute(Gateway(o_.subnet), ns.address));
    // Its own ephemeral ports, never the node's task ports: its block, or the
    // whole range (forwarded nowhere). /proc/sys/net is the namespace's of the
    // thread that opens it.
    const auto [lo, hi] = ns.block >= 0 ? BlockPorts(ns.block) : std::pair<int, int>{o_.ephemeral_lo, o_.ephemeral_hi};
    RM_RETURN_IF_ERROR(WriteSysctl("net/ipv4/ip_local_port_range", fmt::format("{} {}", lo, hi)));
    return InstallFilter(rules);
  }));
  if (ns.block < 0) {
    spdlog::debug("task network: {} at {}", ns.path, FormatIpv4(ns.address));
    return Status::Ok();
  }
  const auto [lo, hi] = BlockPorts(ns.block);
  RM_RETURN_IF_ERROR(Forward(fmt::format("{}-{}", lo, hi), ns.address, ""));
  spdlog::info("task network: {} at {} (ports {}-{} forwarded)", ns.path, FormatIpv4(ns.address), lo, hi);
  return Status::Ok();
}

void JobNetwork::Teardown(const Namespace& ns) {
  if (ns.recovered && ns.address != 0) {
    UnforwardAll(ns.address);  // its tasks' ports are not known here
  } else if (ns.block >= 0) {
    const auto [lo, hi] = BlockPorts(ns.block);
    Unforward(fmt::format("{}-{}", lo, hi), ns.address, "");
  }
  // The namespace ends with its last process and this mount; its veth with
  // it, later: deleted now, its name is free for a new attempt at once.
  ::umount2(ns.path.c_str(), MNT_DETACH);
  ::unlink(ns.path.c_str());
  if (auto host = RtNetlink::Open(); host.ok()) (void)host->DeleteLink(VethName(ns.path));
}

void JobNetwork::Release(const std::string& name, const NamespacePtr& ns) {
  if (ns->address != 0) Unclaim("addr", ns->address, ns->path);
  if (ns->block >= 0) Unclaim("ports", BlockPorts(ns->block).first, ns->path);
  if (auto it = nets_.find(name); it != nets_.end() && it->second == ns) nets_.erase(it);
  ns->state = Namespace::State::kGone;
  ns->changed.notify_all();
}

Status JobNetwork::Refilter(Namespace& ns) {
  std::lock_guard<std::mutex> f(ns.filter_mu);
  FilterRules rules;
  {
    std::lock_guard<std::mutex> l(mu_);
    rules = Rules(ns);
  }
  return InNamespace(ns.path, [&] { return InstallFilter(rules); });
}

StatusOr<std::string> JobNetwork::Join(int64_t job, int attempt, const std::string& key, int port,
                                       const std::vector<std::string>& peers) {
  const std::string name = Name(job, attempt);
  NamespacePtr ns;
  bool refilter = false, forward = false, open_block = false;
  {
    std::unique_lock<std::mutex> l(mu_);
    if (auto o = owner_.find(key); o != owner_.end() && o->second != name) {
      return FailedPrecondition(fmt::format("task {} is in {} already", key, o->second));
    }
    for (;;) {
      auto it = nets_.find(name);
      if (it != nets_.end()) {
        ns = it->second;
        if (ns->state == Namespace::State::kReady && !ns->opening) break;
        // Being made (then joined), opened to new peers (then joined), or
        // removed (then made afresh).
        ns->changed.wait(l, [&] {
          return (ns->state == Namespace::State::kReady && !ns->opening) || ns->state == Namespace::State::kGone;
        });
        continue;
      }
      RM_ASSIGN_OR_RETURN(ns, Reserve(name, !peers.empty()));
      ns->peers.insert(peers.begin(), peers.end());
      const FilterRules rules = Rules(*ns);
      const int bridge = bridge_;
      l.unlock();
      Status st = Build(*ns, bridge, rules);
      if (!st.ok()) Teardown(*ns);
      l.lock();
      if (!st.ok()) {
        Release(name, ns);
        return st;
      }
      ns->state = Namespace::State::kReady;
      ns->changed.notify_all();
      break;
    }
    const std::set<std::string> had = ns->peers;
    const size_t before = ns->peers.size();
    ns->peers.insert(peers.begin(), peers.end());
    refilter = ns->peers.size() != before;
    // Peers on other nodes now: its listeners need a forwarded block.
    if (refilter && ns->block < 0) {
      if (!ClaimBlock(*ns)) {
        for (const std::string& p : peers) {
          if (!had.count(p)) ns->peers.erase(p);  // as it was: a later join tries again
        }
        return ResourceExhausted("task network: all ephemeral port blocks are in use");
      }
      open_block = true;
    }
    ns->opening = refilter;
    ns->keys.insert(key);
    owner_[key] = name;
    // The server hands a port of this node to one task at a time.
    if (port > 0 && !ns->ports.count(key)) {
      ns->ports[key] = port;
      forward = true;
    }
  }
  // The task is in the namespace's keys: no Leave removes it meanwhile.
  Status st = open_block ? OpenBlock(*ns) : Status::Ok();
  if (st.ok() && refilter) st = Refilter(*ns);
  if (refilter) {
    std::lock_guard<std::mutex> l(mu_);
    ns->opening = false;
    ns->changed.notify_all();
  }
  if (st.ok() && forward) st = Forward(std::to_string(port), ns->address, key);
  if (!st.ok()) {
    Leave(key);
    return st;
  }
  return ns->path;
}

JobNetwork::~JobNetwork() {
  std::lock_guard<std::mutex> l(mu_);
  if (!nets_.empty() || !mounted_) return;
  ::umount2(o_.state_dir.c_str(), 0);
}

void JobNetwork::Leave(const std::string& key) {
  std::string name;
  NamespacePtr ns;
  int port = 0;
  bool last = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto o = owner_.find(key);
    if (o == owner_.end()) return;
    name = o->second;
    owner_.erase(o);
    auto it = nets_.find(name);
    if (it == nets_.end()) return;
    ns = it->second;
    if (auto p = ns->ports.find(key); p != ns->ports.end()) {
      port = p->second;
      ns->ports.erase(p);
    }
    ns->keys.erase(key);
    if (ns->keys.empty() && ns->state == Namespace::State::kReady) {
      ns->state = Namespace::State::kRemoving;
      last = true;
    }
  }
  if (port > 0) Unforward(std::to_string(port), ns->address, key);
  if (!last) return;
  Teardown(*ns);
  std::lock_guard<std::mutex> l(mu_);
  Release(name, ns);
  spdlog::info("task network: {} removed", name);
}
}  // namespace ringmaster::net
