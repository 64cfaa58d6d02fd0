#!/usr/bin/env bash
# Ring vs parameter server, reproduced (the first thesis' claim).
#
# Builds N emulated hosts as network namespaces, each with one veth link to
# a bridge (in a switch namespace of its own), shapes every link to 1 Gbit/s
# in both directions with tc tbf, runs one ringcomm rank per host, and prints
# the time of one 64 MiB all-reduce for the ring and for the parameter
# server, for N = 2, 4, 8. The namespaces and every process it started are
# removed on exit. Needs root and iproute2.
#
#   bench/ring_vs_ps.sh [N ...]          (default: 2 4 8)
#   RINGCOMM_BENCH=path/to/ringcomm-bench  RATE=1gbit  SIZE=64M  ITERS=10
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(readlink -f "${RINGCOMM_BENCH:-build/bench/ringcomm-bench}")
RATE=${RATE:-1gbit}
SIZE=${SIZE:-64M}
ITERS=${ITERS:-10}
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(2 4 8)
TAG=rv$$
SUBNET=10.213.77   # only inside the namespaces this script creates
PIDS=()
NAMESPACES=()

cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT

[ -x "$BIN" ] || { echo "ring_vs_ps: $BIN not built (make build)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "ring_vs_ps: needs root (network namespaces)" >&2; exit 2; }

make_hosts() {  # make_hosts N: switch namespace + N hosts h0..h(N-1)
  local n=$1 i
  ip netns add "${TAG}sw"; NAMESPACES+=("${TAG}sw")
  ip -n "${TAG}sw" link add br0 type bridge
  ip -n "${TAG}sw" link set br0 up
  for ((i = 0; i < n; i++)); do
    local h="${TAG}h$i"
    ip netns add "$h"; NAMESPACES+=("$h")
    ip link add "${TAG}a$i" type veth peer name "${TAG}b$i"
    ip link set "${TAG}a$i" netns "$h"
    ip link set "${TAG}b$i" netns "${TAG}sw"
    ip -n "$h" link set "${TAG}a$i" name eth0
    ip -n "$h" addr add "$SUBNET.$((i + 1))/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" link set lo up
    ip -n "${TAG}sw" link set "${TAG}b$i" master br0
    ip -n "${TAG}sw" link set "${TAG}b$i" up
    # The host's link: RATE out of the host and RATE into it.
    ip netns exec "$h" tc qdisc add dev eth0 root tbf rate "$RATE" burst 512kb latency 100ms
    ip netns exec "${TAG}sw" tc qdisc add dev "${TAG}b$i" root tbf rate "$RATE" burst 512kb latency 100ms
  done
}

drop_hosts() {
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  NAMESPACES=()
}

run() {  # run N ALGORITHM -> prints the median time in ms
  local n=$1 algo=$2 port=$((29500 + RANDOM % 1000)) i out
  ip netns exec "${TAG}h0" "$BIN" --store-server --store-host "$SUBNET.1" --store-port "$port" > /dev/null &
  local store=$!
  PIDS+=("$store")
  local workers=()
  out=$(mktemp)
  for ((i = 0; i < n; i++)); do
    ip netns exec "${TAG}h$i" "$BIN" --worker ringcomm --rank "$i" --ranks "$n" --store-host "$SUBNET.1" \
      --store-port "$port" --address "$SUBNET.$((i + 1))" --transport tcp --algorithms "$algo" \
      --sizes "$SIZE" --iters "$ITERS" --warmup 1 --timeout 600 > "$( [ "$i" = 0 ] && echo "$out" || echo /dev/null)" &
    workers+=($!)
    PIDS+=($!)
  done
  local failed=0
  for w in "${workers[@]}"; do wait "$w" || failed=1; done
  kill "$store"; wait "$store" 2>/dev/null || true
  local ms
  ms=$(awk '/^RESULT/ { printf "%.1f", $6 / 1000 }' "$out")
  rm -f "$out"
  if [ "$failed" = 1 ] || [ -z "$ms" ]; then
    echo "ring_vs_ps: the $algo run on $n hosts failed" >&2
    exit 1
  fi
  echo "$ms"
}

echo "one $SIZE all-reduce (float32 sum), one rank per emulated host, each link $RATE both ways; median of $ITERS"
printf '%-6s %12s %12s %10s %14s %14s\n' hosts ring_ms ps_ms ps/ring ring_vs_N=2 ps_vs_N=2
ring2="" ps2=""
for n in "${SIZES[@]}"; do
  make_hosts "$n"
  r=$(run "$n" ring)
  p=$(run "$n" ps)
  drop_hosts
  [ -n "$ring2" ] || { ring2=$r; ps2=$p; }
  printf '%-6s %12s %12s %10.2f %14.2f %14.2f\n' "$n" "$r" "$p" "$(echo "$p / $r" | bc -l)" \
    "$(echo "$r / $ring2" | bc -l)" "$(echo "$p / $ps2" | bc -l)"
done
