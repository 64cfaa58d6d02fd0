// Overlay: a node's side of the container network that spans hosts
// (docs/cluster.md). Every container on it has an address of the cluster's
// subnet from its node's block, one flat layer-2 segment across hosts, and
// nothing else: no gateway, so a container reaches the other containers of
// the overlay and not the host's own services.
//  - vxlan: a Linux bridge (rmbr0) and the kernel's VXLAN device (rmvx0,
//    VNI 4242, UDP 4789) on it; broadcasts go to every peer (one all-zero
//    FDB entry per peer, as flannel and Docker's overlay driver do), unicast
//    to the peer the bridge learnt. MTU 1450.
//  - ovs-gre: Open vSwitch with GRE tunnels. A bridge (rmint0) on
//    the userspace datapath with a GRE port to every other node. No
//    flooding and no learning across hosts: flows send a peer block's IP and
//    ARP traffic down that peer's tunnel and each local container's to its
//    port, and tunnel ports are no-flood, so a mesh of tunnels cannot loop.
//    MTU 1462; the container's checksums are computed in its kernel (tx
//    offload off), which the userspace datapath needs.
// Agents keep the tunnels in step with the node list the server serves
// (SetPeers). A task joins the overlay through runc's createRuntime hook:
// `ringmaster net-attach` (AttachTask) puts a veth into the container's new
// network namespace before its process starts; the veth goes away with the
// namespace. Everything is done with iproute2, ovs-vsctl and ovs-ofctl, as
// root. Thread-compatible.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "net/ipv4.h"

namespace ringmaster::net {

inline constexpr const char* kBridge = "rmbr0";    // vxlan
inline constexpr const char* kVxlan = "rmvx0";     // vxlan
inline constexpr const char* kOvsBridge = "rmint0";  // ovs-gre
inline constexpr int kVni = 4242;
inline constexpr int kVxlanPort = 4789;

// "host", "vxlan" or "ovs-gre".
bool IsNetworkMode(const std::string& mode);
// The containers' MTU on an underlay of `underlay_mtu`: room for each mode's
// encapsulation (VXLAN 50 bytes, Ethernet over GRE 38).
int OverlayMtu(const std::string& mode, int underlay_mtu = 1500);

struct OverlayOptions {
  std::string mode;       // "vxlan" or "ovs-gre"
  std::string underlay;   // this node's tunnel endpoint (its address)
  Ipv4Net subnet;         // the cluster's
  Ipv4Net block;          // this node's
  // ovs-gre: the directory of Open vSwitch's sockets (db.sock and each
  // bridge's <bridge>.mgmt).
  std::string ovs_dir = "/var/run/openvswitch";
};

struct OverlayPeer {
  std::string node;
  std::string underlay;
  Ipv4Net block;
};

class Overlay {
 public:
  explicit Overlay(OverlayOptions options) : o_(std::move(options)) {}
  const OverlayOptions& options() const { return o_; }
  int mtu() const { return OverlayMtu(o_.mode); }

  // Makes the node's bridge and tunnel device (or checks they are there:
  // an agent restarting leaves its running containers connected).
  Status Setup();
  // Tunnels to exactly these peers (this node among them is skipped).
  Status SetPeers(const std::vector<OverlayPeer>& peers);
  // The runc createRuntime hook that attaches a task (`key`, its attempt's
  // key on this node) at `address`, its filter letting in only `peers` (the
  // job's other tasks' overlay addresses): argv for OCI's hooks (path = argv[0]).
  std::vector<std::string> AttachHook(const std::string& self_exe, const std::string& key, uint32_t address,
                                      const std::vector<std::string>& peers) const;
  // What AttachTask left on the node for a task (ovs-gre: its port and
  // flows); idempotent.
  void Detach(const std::string& key) const;
  // The host side of a task's veth: "rm" + 12 hex digits of its key.
  static std::string VethName(const std::string& key);

 private:
  OverlayOptions o_;
};

struct AttachRequest {
  std::string mode;
  std::string veth;      // the host side's name
  std::string address;   // "10.244.3.5/16"
  int mtu = 1450;
  std::string ovs_dir;
  pid_t pid = 0;         // a process in the container's network namespace
  // Set: the namespace's filter (task_filter.h) lets in only these, written
  // through a script in `script_dir` (the container's bundle).
  std::optional<std::vector<std::string>> peers;
  std::string script_dir = "/tmp";
};
// Creates the task's veth pair, the container's end as eth0 in the
// namespace of `pid` with its address, up, and the host's end on the node's
// bridge (with its flows on ovs-gre); then its filter.
Status AttachTask(const AttachRequest& r);
// `ringmaster net-attach`: the hook's entry point; reads runc's state from
// stdin for the container's pid (and bundle) when --pid is not given.
// Returns the exit code.
int NetAttachMain(int argc, char** argv);

}  // namespace ringmaster::net
