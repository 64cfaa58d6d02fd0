# Emulated hosts for the network benchmarks (sourced by bench/ring_vs_ps.sh and
# bench/frameworks/run.sh): network namespaces ${TAG}h<NAME>, each with one veth
# link (eth0) to a bridge in a switch namespace of its own, ${TAG}sw, shaped to
# RATE in both directions with tc tbf. The caller sets TAG and RATE and keeps
# NAMESPACES (an array) for its cleanup; drop_hosts removes them all.

make_switch() {
  ip netns add "${TAG}sw"; NAMESPACES+=("${TAG}sw")
  ip -n "${TAG}sw" link add br0 type bridge
  ip -n "${TAG}sw" link set br0 up
}

add_host() {  # add_host NAME ADDRESS: host ${TAG}hNAME at ADDRESS/24 on the switch
  local i=$1 h="${TAG}h$1"
  ip netns add "$h"; NAMESPACES+=("$h")
  ip link add "${TAG}a$i" type veth peer name "${TAG}b$i"
  ip link set "${TAG}a$i" netns "$h"
  ip link set "${TAG}b$i" netns "${TAG}sw"
  ip -n "$h" link set "${TAG}a$i" name eth0
  ip -n "$h" addr add "$2/24" dev eth0
  ip -n "$h" link set eth0 up
  ip -n "$h" link set lo up
  ip -n "${TAG}sw" link set "${TAG}b$i" master br0
  ip -n "${TAG}sw" link set "${TAG}b$i" up
  # The host's link: RATE out of the host and RATE into it.
  ip netns exec "$h" tc qdisc add dev eth0 root tbf rate "$RATE" burst 512kb latency 100ms
  ip netns exec "${TAG}sw" tc qdisc add dev "${TAG}b$i" root tbf rate "$RATE" burst 512kb latency 100ms
}

drop_hosts() {
  local ns
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  NAMESPACES=()
}
