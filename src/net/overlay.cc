#include "net/overlay.h"

#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/crypto.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "net/task_filter.h"

namespace ringmaster::net {
namespace {

std::string Ovsdb(const std::string& dir) { return "--db=unix:" + dir + "/db.sock"; }
std::string Mgmt(const std::string& dir) { return "unix:" + dir + "/" + kOvsBridge + ".mgmt"; }

// A peer's tunnel port: "rmg" + its underlay address in hex (11 characters).
std::string TunnelPort(uint32_t underlay) { return fmt::format("rmg{:08x}", underlay); }

// The address part of "10.244.3.5/16".
std::string HostPart(const std::string& cidr) { return cidr.substr(0, cidr.find('/')); }

}  // namespace

bool IsNetworkMode(const std::string& m) { return m == "host" || m == "vxlan" || m == "ovs-gre"; }

int OverlayMtu(const std::string& mode, int underlay_mtu) {
  if (mode == "vxlan") return underlay_mtu - 50;    // outer IP 20 + UDP 8 + VXLAN 8 + inner Ethernet 14
  if (mode == "ovs-gre") return underlay_mtu - 38;  // outer IP 20 + GRE 4 + inner Ethernet 14
  return underlay_mtu;
}

std::string Overlay::VethName(const std::string& key) { return "rm" + Sha256Hex(key).substr(0, 12); }

namespace {

// The host takes nothing from its containers through the overlay's bridge:
// no IPv6 (a link-local address would let containers reach the host's
// services on every node) and an INPUT drop for what the bridge delivers
// locally (IPv4 broadcasts, to the VXLAN socket among others).
Status SealFromHost(const std::string& dev) {
  (void)RunTool({"sysctl", "-q", "-w", "net.ipv6.conf." + dev + ".disable_ipv6=1"});
  for (const char* tool : {"iptables", "ip6tables"}) {
    const std::vector<std::string> rule = {"INPUT", "-i", dev, "-j", "DROP"};
    std::vector<std::string> check = {tool, "-w", "-C"}, insert = {tool, "-w", "-I"};
    check.insert(check.end(), rule.begin(), rule.end());
    insert.insert(insert.end(), rule.begin(), rule.end());
    if (!RunTool(check).ok()) {
      if (Status st = RunTool(insert).status(); !st.ok()) {
        return Internal(fmt::format("sealing {} from the host: {}", dev, st.message()));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status Overlay::Setup() {
  const std::string mtu = std::to_string(this->mtu());
  if (o_.mode == "vxlan") {
    if (!RunTool({"ip", "link", "show", kBridge}).ok()) {
      RM_RETURN_IF_ERROR(RunTool({"ip", "link", "add", kBridge, "type", "bridge"}).status());
    }
    if (!RunTool({"ip", "link", "show", kVxlan}).ok()) {
      // learning stays on: unicast goes to the peer a MAC was last seen behind.
      RM_RETURN_IF_ERROR(RunTool({"ip", "link", "add", kVxlan, "type", "vxlan", "id", std::to_string(kVni), "local",
                                  o_.underlay, "dstport", std::to_string(kVxlanPort)})
                             .status());
    }
    RM_RETURN_IF_ERROR(SealFromHost(kBridge));
    RM_RETURN_IF_ERROR(RunTool({"ip", "link", "set", kVxlan, "mtu", mtu, "master", kBridge, "up"}).status());
    RM_RETURN_IF_ERROR(RunTool({"ip", "link", "set", kBridge, "mtu", mtu, "up"}).status());
    // VXLAN is plain UDP: a process on this host (a task on the host's
    // network) could send frames into the overlay as any container. Only
    // the kernel's own VXLAN socket (no owner) and root may send to the port.
    const std::vector<std::string> rule = {"OUTPUT", "-p", "udp", "--dport", std::to_string(kVxlanPort), "-m", "owner",
                                           "--uid-owner", "1-4294967294", "-j", "DROP"};
    auto iptables = [&](const char* op) {
      std::vector<std::string> argv = {"iptables", "-w", op};
      argv.insert(argv.end(), rule.begin(), rule.end());
      return RunTool(argv).status();
    };
    if (!iptables("-C").ok()) {
      if (Status st = iptables("-I"); !st.ok()) {
        spdlog::warn("overlay: local processes can send into the VXLAN port (no iptables rule: {})", st.message());
      }
    }
    return Status::Ok();
  }
  if (o_.mode == "ovs-gre") {
    RM_RETURN_IF_ERROR(RunTool({"ovs-vsctl", Ovsdb(o_.ovs_dir), "--timeout=20", "--may-exist", "add-br", kOvsBridge,
                                "--", "set", "bridge", kOvsBridge, "datapath_type=netdev"})
                           .status());
    RM_RETURN_IF_ERROR(SealFromHost(kOvsBridge));
    // Ports whose device is gone (a container that ended while no agent ran).
    auto ports = RunTool({"ovs-vsctl", Ovsdb(o_.ovs_dir), "--timeout=20", "list-ports", kOvsBridge});
    if (ports.ok()) {
      std::istringstream in(*ports);
      for (std::string p; std::getline(in, p);) {
        if (p.rfind("rm", 0) == 0 && p.rfind("rmg", 0) != 0 && !RunTool({"ip", "link", "show", p}).ok()) {
          (void)RunTool({"ovs-vsctl", Ovsdb(o_.ovs_dir), "--timeout=20", "--if-exists", "del-port", kOvsBridge, p});
        }
      }
    }
    return Status::Ok();
  }
  return InvalidArgument("network mode " + o_.mode + " has no overlay");
}

Status Overlay::SetPeers(const std::vector<OverlayPeer>& peers) {
  const auto self = ParseIpv4(o_.underlay);
  std::map<uint32_t, Ipv4Net> want;  // underlay -> block
  for (const auto& p : peers) {
    auto u = ParseIpv4(p.underlay);
    if (!u || (self && *u == *self) || p.block == o_.block) continue;
    want[*u] = p.block;
  }
  if (o_.mode == "vxlan") {
    RM_ASSIGN_OR_RETURN(std::string fdb, RunTool({"bridge", "fdb", "show", "dev", kVxlan}));
    std::set<uint32_t> have;
    std::istringstream in(fdb);
    for (std::string line; std::getline(in, line);) {
      std::istringstream w(line);
      std::string mac, word, dst;
      w >> mac;
      while (w >> word) {
        if (word == "dst") w >> dst;
      }
      if (mac != "00:00:00:00:00:00" || dst.empty()) continue;
      if (auto a = ParseIpv4(dst)) have.insert(*a);
    }
    for (uint32_t a : have) {
      if (!want.count(a)) {
        RM_RETURN_IF_ERROR(
            RunTool({"bridge", "fdb", "del", "00:00:00:00:00:00", "dev", kVxlan, "dst", FormatIpv4(a)}).status());
      }
    }
    for (const auto& [a, block] : want) {
      if (!have.count(a)) {
        RM_RETURN_IF_ERROR(
            RunTool({"bridge", "fdb", "append", "00:00:00:00:00:00", "dev", kVxlan, "dst", FormatIpv4(a)}).status());
        spdlog::info("overlay: vxlan peer {} ({})", FormatIpv4(a), FormatCidr(block));
      }
    }
    return Status::Ok();
  }
  // ovs-gre: a GRE port per peer, no-flood, and flows for its block.
  const std::string db = Ovsdb(o_.ovs_dir), mgmt = Mgmt(o_.ovs_dir);
  RM_ASSIGN_OR_RETURN(std::string list, RunTool({"ovs-vsctl", db, "--timeout=20", "list-ports", kOvsBridge}));
  std::set<std::string> have;
  std::istringstream in(list);
  for (std::string p; std::getline(in, p);) {
    if (p.rfind("rmg", 0) == 0) have.insert(p);
  }
  std::set<std::string> wanted;
  for (const auto& [a, block] : want) {
    const std::string port = TunnelPort(a);
    wanted.insert(port);
    // Port, no-flood and flows every time (all idempotent): a step that
    // failed before is made good, and flows lost with a restarted vswitchd too.
    RM_RETURN_IF_ERROR(RunTool({"ovs-vsctl", db, "--timeout=20", "--may-exist", "add-port", kOvsBridge, port, "--", "set",
                                "interface", port, "type=gre", "options:remote_ip=" + FormatIpv4(a)})
                           .status());
    RM_RETURN_IF_ERROR(RunTool({"ovs-ofctl", "mod-port", mgmt, port, "no-flood"}).status());
    const std::string net = FormatCidr(block);
    RM_RETURN_IF_ERROR(
        RunTool({"ovs-ofctl", "add-flow", mgmt, fmt::format("priority=100,ip,nw_dst={},actions=output:{}", net, port)})
            .status());
    RM_RETURN_IF_ERROR(
        RunTool({"ovs-ofctl", "add-flow", mgmt, fmt::format("priority=100,arp,arp_tpa={},actions=output:{}", net, port)})
            .status());
    if (!have.count(port)) spdlog::info("overlay: gre peer {} ({}) on port {}", FormatIpv4(a), net, port);
  }
  for (const std::string& port : have) {
    if (wanted.count(port)) continue;
    (void)RunTool({"ovs-ofctl", "del-flows", mgmt, "out_port=" + port});
    RM_RETURN_IF_ERROR(RunTool({"ovs-vsctl", db, "--timeout=20", "--if-exists", "del-port", kOvsBridge, port}).status());
    spdlog::info("overlay: gre port {} removed", port);
  }
  return Status::Ok();
}

std::vector<std::string> Overlay::AttachHook(const std::string& self_exe, const std::string& key, uint32_t address,
                                            const std::vector<std::string>& peers) const {
  std::string list;
  for (const std::string& p : peers) list += (list.empty() ? "" : ",") + p;
  std::vector<std::string> argv = {self_exe,    "net-attach", "--mode",   o_.mode,
                                   "--veth",    VethName(key),
                                   "--address", fmt::format("{}/{}", FormatIpv4(address), o_.subnet.prefix),
                                   "--mtu",     std::to_string(mtu()),
                                   "--peers",   list};
  if (o_.mode == "ovs-gre") {
    argv.push_back("--ovs-dir");
    argv.push_back(o_.ovs_dir);
  }
  return argv;
}

void Overlay::Detach(const std::string& key) const {
  const std::string veth = VethName(key);
  // The veth itself ends with the container's namespace; an early end of
  // the hook may have left it.
  (void)RunTool({"ip", "link", "del", veth});
  if (o_.mode == "ovs-gre") {
    (void)RunTool({"ovs-ofctl", "del-flows", Mgmt(o_.ovs_dir), "out_port=" + veth});
    (void)RunTool({"ovs-vsctl", Ovsdb(o_.ovs_dir), "--timeout=20", "--if-exists", "del-port", kOvsBridge, veth});
  }
}

Status AttachTask(const AttachRequest& r) {
  if (r.mode != "vxlan" && r.mode != "ovs-gre") return InvalidArgument("--mode: vxlan or ovs-gre");
  if (r.pid <= 0) return InvalidArgument("no container pid");
  auto cidr = ParseIpv4(HostPart(r.address));
  if (!cidr) return InvalidArgument("--address: " + r.address + " is not an address/prefix");
  if (r.veth.empty() || r.veth.size() > 15 || r.veth.rfind("rm", 0) != 0) return InvalidArgument("--veth: rm<hex>, 15 characters at most");
  const std::string pid = std::to_string(r.pid), mtu = std::to_string(r.mtu);
  const std::string ns = "--net=/proc/" + pid + "/ns/net";
  (void)RunTool({"ip", "link", "del", r.veth});  // a leftover of an attempt that failed half-way
  RM_RETURN_IF_ERROR(RunTool({"ip", "link", "add", r.veth, "mtu", mtu, "type", "veth", "peer", "name", "eth0", "mtu", mtu,
                              "netns", pid})
                         .status());
  auto in_ns = [&](std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"nsenter", ns, "--"});
    return RunTool(argv).status();
  };
  RM_RETURN_IF_ERROR(in_ns({"ip", "link", "set", "lo", "up"}));
  RM_RETURN_IF_ERROR(in_ns({"ip", "addr", "add", r.address, "dev", "eth0"}));
  if (r.mode == "ovs-gre") {
    // The userspace datapath takes frames from the veth as they are: no
    // partial checksums for it to complete.
    RM_RETURN_IF_ERROR(in_ns({"ethtool", "-K", "eth0", "tx", "off"}));
  }
  RM_RETURN_IF_ERROR(in_ns({"ip", "link", "set", "eth0", "up"}));
  if (r.peers) {
    FilterRules rules;
    rules.peers = *r.peers;
    RM_RETURN_IF_ERROR(ApplyFilter("/proc/" + pid + "/ns/net", rules, r.script_dir + "/" + r.veth + ".nft",
                                   DefaultToolRunner()));
  }
  if (r.mode == "vxlan") {
    RM_RETURN_IF_ERROR(RunTool({"ip", "link", "set", r.veth, "master", kBridge, "up"}).status());
    return Status::Ok();
  }
  const std::string db = Ovsdb(r.ovs_dir), mgmt = Mgmt(r.ovs_dir);
  RM_RETURN_IF_ERROR(RunTool({"ip", "link", "set", r.veth, "up"}).status());
  RM_RETURN_IF_ERROR(RunTool({"ovs-vsctl", db, "--timeout=20", "--may-exist", "add-port", kOvsBridge, r.veth}).status());
  const std::string ip = HostPart(r.address);
  RM_RETURN_IF_ERROR(
      RunTool({"ovs-ofctl", "add-flow", mgmt, fmt::format("priority=200,ip,nw_dst={},actions=output:{}", ip, r.veth)})
          .status());
  return RunTool({"ovs-ofctl", "add-flow", mgmt, fmt::format("priority=200,arp,arp_tpa={},actions=output:{}", ip, r.veth)})
      .status();
}

int NetAttachMain(int argc, char** argv) {
  AttachRequest r;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "net-attach: " << name << " needs a value\n";
        _exit(2);
      }
      return argv[++i];
    };
    if (a == "--mode") r.mode = value("--mode");
    else if (a == "--veth") r.veth = value("--veth");
    else if (a == "--address") r.address = value("--address");
    else if (a == "--mtu") r.mtu = std::atoi(value("--mtu").c_str());
    else if (a == "--ovs-dir") r.ovs_dir = value("--ovs-dir");
    else if (a == "--pid") r.pid = std::atoi(value("--pid").c_str());
    else if (a == "--peers") r.peers = Split(value("--peers"), ',');
    else {
      std::cerr << "net-attach: unknown argument " << a
                << " (usage: ringmaster net-attach --mode vxlan|ovs-gre --veth NAME --address A/N --mtu N "
                   "[--ovs-dir DIR] [--peers A,B,...] [--pid PID]; runc's state on stdin gives the pid)\n";
      return 2;
    }
  }
  if (r.pid == 0) {
    // runc hands a hook the container's state on stdin.
    std::string state((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    auto j = nlohmann::json::parse(state, nullptr, false);
    if (j.is_object() && j.contains("pid") && j["pid"].is_number_integer()) r.pid = j["pid"].get<int>();
    // The bundle is the agent's private directory for the task: the filter's script goes there.
    if (j.is_object() && j.contains("bundle") && j["bundle"].is_string()) r.script_dir = j["bundle"].get<std::string>();
  }
  Status st = AttachTask(r);
  if (!st.ok()) {
    std::cerr << "net-attach: " << st.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace ringmaster::net
