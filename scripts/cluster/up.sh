#!/usr/bin/env bash
# A Ringmaster cluster of N hosts on one machine, for tests, benchmarks and
# demos (docs/cluster.md). Each host is a network namespace with one link
# (veth, 10.231.0.I/24 by default) to a switch: a Linux bridge in a
# namespace of its own. Host 1 runs the server (TLS, the embedded SQLite and
# local files service, reachable from every host); every host runs an agent
# with its own data dir, sandboxes and cgroups, executors process and runc.
# Containers talk across hosts over the chosen network:
#   host      the hosts' own addresses (tasks share their host's network)
#   vxlan     the kernel's VXLAN, a Linux bridge per host
#   ovs-gre   Open vSwitch (a private ovsdb-server + ovs-vswitchd per host,
#             userspace datapath) with a GRE port to every other host; the
#             host's address moves onto an OVS bridge over its link, where
#             OVS's native tunnelling needs it.
# Everything it makes is named <name>-* and recorded in the state dir, so
# scripts/cluster/down.sh removes exactly that.
#
#   scripts/cluster/up.sh N [--network host|vxlan|ovs-gre] [--name rmc]
#       [--state DIR] [--bin build/src/cli/ringmaster] [--rate 1gbit]
#       [--subnet 10.231.0] [--image-cache DIR] [--agent-flags "..."] [--server-flags "..."]
#
# Then `$STATE/rm <command>` runs the CLI as the cluster's admin (on host 1),
# `$STATE/on hI <command>` runs a command on host I.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/cluster/procs.sh
N=${1:?usage: scripts/cluster/up.sh N [--network host|vxlan|ovs-gre] [--name NAME] [--state DIR] ...}
shift
NETWORK=host NAME=rmc STATE="" BIN=build/src/cli/ringmaster RATE="" SUBNET=10.231.0 IMAGE_CACHE="" AGENT_FLAGS="" SERVER_FLAGS=""
while [ $# -gt 0 ]; do
  case $1 in
    --network) NETWORK=$2; shift 2 ;;
    --name) NAME=$2; shift 2 ;;
    --state) STATE=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --subnet) SUBNET=$2; shift 2 ;;
    --image-cache) IMAGE_CACHE=$2; shift 2 ;;
    --agent-flags) AGENT_FLAGS=$2; shift 2 ;;
    --server-flags) SERVER_FLAGS=$2; shift 2 ;;
    *) echo "up.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
case $NETWORK in host|vxlan|ovs-gre) ;; *) echo "up.sh: --network must be host, vxlan or ovs-gre" >&2; exit 2 ;; esac
[[ $N =~ ^[0-9]+$ ]] && [ "$N" -ge 1 ] && [ "$N" -le 200 ] || { echo "up.sh: N must be 1-200 hosts" >&2; exit 2; }
[[ $NAME =~ ^[a-z][a-z0-9]{0,5}$ ]] || { echo "up.sh: --name must be 1-6 lowercase letters/digits (interface names are short)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "up.sh: needs root (namespaces, cgroups, runc)" >&2; exit 2; }
BIN=$(readlink -f "$BIN")
[ -x "$BIN" ] || { echo "up.sh: $BIN is not built (make build)" >&2; exit 2; }
if [ "$NETWORK" = ovs-gre ]; then
  command -v ovs-vswitchd > /dev/null || { echo "up.sh: ovs-gre needs Open vSwitch (scripts/install-deps.sh)" >&2; exit 2; }
fi
ip netns list | grep -q "^$NAME-sw\b" && { echo "up.sh: a cluster named $NAME is up already (scripts/cluster/down.sh --state ...)" >&2; exit 2; }
STATE=${STATE:-/tmp/ringmaster-cluster-$NAME}
mkdir -p "$STATE"
STATE=$(readlink -f "$STATE")
chmod 0755 "$STATE"  # task users traverse it to their sandboxes
IMAGE_CACHE=${IMAGE_CACHE:-$STATE/images}
if [ -f "$STATE/pids" ]; then
  while read -r _ pid start; do
    if [ -n "$start" ] && proc_running "$pid" "$start" ||
       { [ -z "$start" ] && [ -d "/proc/$pid" ] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$STATE/"; }; then
      echo "up.sh: $STATE belongs to a cluster that still runs (pid $pid): scripts/cluster/down.sh --state $STATE" >&2
      exit 2
    fi
  done < "$STATE/pids"
fi
echo "$NAME" > "$STATE/name"
# One line per daemon started: "what pid start-time" (procs.sh), so that
# down.sh and the tests know each by more than a pid the kernel may reuse.
: > "$STATE/pids"
record() { echo "$1 $2 $(proc_start "$2")" >> "$STATE/pids"; }  # record WHAT PID

ns() { echo "$NAME-$1"; }
# Daemons run in a host's network namespace through nsenter, not `ip netns
# exec`, whose fresh /sys would hide the cgroup hierarchies the agent uses;
# started directly (no function or subshell) so that the pid recorded is theirs.

# ---- the switch and the hosts' links
ip netns add "$(ns sw)"
ip -n "$(ns sw)" link add br0 type bridge
ip -n "$(ns sw)" link set br0 up
for i in $(seq 1 "$N"); do
  h=h$i
  ip netns add "$(ns $h)"
  ip -n "$(ns $h)" link set lo up
  ip link add "${NAME}a$i" type veth peer name "${NAME}b$i"
  ip link set "${NAME}a$i" netns "$(ns $h)"
  ip link set "${NAME}b$i" netns "$(ns sw)"
  ip -n "$(ns $h)" link set "${NAME}a$i" name eth0
  ip -n "$(ns sw)" link set "${NAME}b$i" master br0 up
  ip -n "$(ns $h)" link set eth0 up
  if [ -n "$RATE" ]; then  # the host's link: RATE out of the host and RATE into it
    ip netns exec "$(ns $h)" tc qdisc add dev eth0 root tbf rate "$RATE" burst 512kb latency 100ms
    ip netns exec "$(ns sw)" tc qdisc add dev "${NAME}b$i" root tbf rate "$RATE" burst 512kb latency 100ms
  fi
  mkdir -p "$STATE/$h"
  chmod 0755 "$STATE/$h"
  if [ "$NETWORK" = ovs-gre ]; then
    # A private Open vSwitch per host (the userspace datapath: no kernel
    # module), and the host's address on an OVS bridge over its link.
    d=$STATE/$h/ovs
    mkdir -p "$d"
    ovsdb-tool create "$d/conf.db" /usr/share/openvswitch/vswitch.ovsschema
    ip netns exec "$(ns $h)" env OVS_RUNDIR="$d" OVS_LOGDIR="$d" OVS_DBDIR="$d" \
      ovsdb-server "$d/conf.db" --remote="punix:$d/db.sock" --pidfile="$d/ovsdb-server.pid" \
      --unixctl="$d/ovsdb-server.ctl" --log-file="$d/ovsdb-server.log" -vconsole:emer --no-chdir --detach
    record ovsdb-server "$(cat "$d/ovsdb-server.pid")"
    ovs-vsctl --db="unix:$d/db.sock" --no-wait init
    ip netns exec "$(ns $h)" env OVS_RUNDIR="$d" OVS_LOGDIR="$d" OVS_DBDIR="$d" \
      ovs-vswitchd "unix:$d/db.sock" --pidfile="$d/ovs-vswitchd.pid" --unixctl="$d/ovs-vswitchd.ctl" \
      --log-file="$d/ovs-vswitchd.log" -vconsole:emer --no-chdir --detach
    record ovs-vswitchd "$(cat "$d/ovs-vswitchd.pid")"
    ovs-vsctl --db="unix:$d/db.sock" --timeout=20 add-br rmphy -- set bridge rmphy datapath_type=netdev -- add-port rmphy eth0
    ip -n "$(ns $h)" addr add "$SUBNET.$i/24" dev rmphy
    ip -n "$(ns $h)" link set rmphy up
  else
    ip -n "$(ns $h)" addr add "$SUBNET.$i/24" dev eth0
  fi
done

# ---- the server on host 1
SRV=$STATE/server
mkdir -p "$SRV"
nsenter --net="/run/netns/$(ns h1)" -- "$BIN" server --data "$SRV" --host "$SUBNET.1" --port 8443 $SERVER_FLAGS > "$STATE/server.log" 2>&1 &
record server $!
cat > "$STATE/rm" <<SH
#!/bin/sh
# The CLI as the cluster's admin, from host 1.
exec nsenter --net=/run/netns/$(ns h1) -- "$BIN" --data "$SRV" "\$@"
SH
cat > "$STATE/on" <<SH
#!/bin/sh
# on hI COMMAND...: a command in host I's network namespace.
h=\$1; shift
exec nsenter --net=/run/netns/$NAME-\$h -- "\$@"
SH
chmod 0755 "$STATE/rm" "$STATE/on"
for _ in $(seq 1 150); do
  [ -f "$SRV/server.json" ] && "$STATE/rm" nodes > /dev/null 2>&1 && break
  sleep 0.2
done
"$STATE/rm" nodes > /dev/null 2>&1 || { tail -20 "$STATE/server.log" >&2; echo "up.sh: the server did not start" >&2; exit 1; }
URL=$(jq -r .url "$SRV/server.json")

# ---- an agent on every host
for i in $(seq 1 "$N"); do
  h=h$i
  "$STATE/rm" tokens create --scope agent --node "$h" --name "agent $h" > "$STATE/$h/token"
  chmod 0600 "$STATE/$h/token"
  flags=(--server "$URL" --ca "$SRV/tls/ca.crt" --token-file "$STATE/$h/token" --data "$STATE/$h/agent"
         --node-name "$h" --address "$SUBNET.$i" --sandbox-root "$STATE/$h/sandboxes" --executors process,runc
         --image-cache "$IMAGE_CACHE" --network "$NETWORK")
  [ "$NETWORK" = ovs-gre ] && flags+=(--ovs-dir "$STATE/$h/ovs")
  # shellcheck disable=SC2206
  [ -n "$AGENT_FLAGS" ] && flags+=($AGENT_FLAGS)
  mkdir -p "$STATE/$h/sandboxes"
  chmod 0755 "$STATE/$h/sandboxes"
  nsenter --net="/run/netns/$(ns "$h")" -- "$BIN" agent "${flags[@]}" > "$STATE/$h/agent.log" 2>&1 &
  record "agent-$h" $!
done
for _ in $(seq 1 150); do
  [ "$("$STATE/rm" nodes 2>/dev/null | grep -c ' ready ')" = "$N" ] && break
  sleep 0.2
done
if [ "$("$STATE/rm" nodes | grep -c ' ready ')" != "$N" ]; then
  "$STATE/rm" nodes >&2
  for i in $(seq 1 "$N"); do tail -n 3 "$STATE/h$i/agent.log" | sed "s/^/h$i: /" >&2; done
  echo "up.sh: not every agent registered" >&2
  exit 1
fi
echo "cluster $NAME: $N hosts ($SUBNET.1-$N), network $NETWORK, server $URL; state in $STATE"
echo "  try: $STATE/rm nodes"
