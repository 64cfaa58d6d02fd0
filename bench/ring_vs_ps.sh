#!/usr/bin/env bash
# Ring vs parameter server, reproduced (the claim that a ring beats a parameter server as hosts are added).
#
# Builds N emulated hosts as network namespaces, each with one veth link to
# a bridge (in a switch namespace of its own), shapes every link to 1 Gbit/s
# in both directions with tc tbf, runs one ringcomm rank per host, and prints
# the time of one 64 MiB all-reduce for the ring and for the parameter
# server, for N = 2, 4, 8. The namespaces and every process it started are
# removed on exit. Needs root and iproute2.
#
# Each row also prints the ring's two anchors:
#  - bound: 2(N-1)/N × SIZE at exactly RATE, the ring all-reduce's bandwidth bound;
#  - link: the same bytes at the TCP goodput iperf3 measures on the same
#    namespaces in the ring's own pattern (every host sending to the next at
#    once, for LINK_SECS seconds after one of warm-up). It is below RATE by
#    the TCP/IP and Ethernet headers (66 of every 1514 bytes at MTU 1500):
#    no TCP ring does better, bar the few ms the full token buckets give at
#    the start. Without iperf3 the link columns print "-".
# and idle%: the share of the machine's CPU left idle while the ring ran.
# Near 0, the ranks (and other work) were short of CPU and ring_ms says more
# about the machine than the algorithm.
#
#   bench/ring_vs_ps.sh [N ...]          (default: 2 4 8)
#   RINGCOMM_BENCH=path/to/ringcomm-bench  RATE=1gbit  SIZE=64M  ITERS=10  LINK_SECS=3
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(readlink -f "${RINGCOMM_BENCH:-build/bench/ringcomm-bench}")
RATE=${RATE:-1gbit}
SIZE=${SIZE:-64M}
ITERS=${ITERS:-10}
LINK_SECS=${LINK_SECS:-3}
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

. bench/emulated_hosts.sh

make_hosts() {  # make_hosts N: switch namespace + N hosts h0..h(N-1)
  local n=$1 i
  make_switch
  for ((i = 0; i < n; i++)); do add_host "$i" "$SUBNET.$((i + 1))"; done
}

cpu_ticks() {  # prints "busy total" jiffies of the whole machine
  awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print t - $5 - $6, t }' /proc/stat
}

to_bytes() {  # 64M -> bytes (binary units, as ringcomm-bench reads --sizes)
  awk -v s="$1" 'BEGIN { m = 1; u = toupper(substr(s, length(s)));
    if (u == "K") m = 2^10; else if (u == "M") m = 2^20; else if (u == "G") m = 2^30;
    if (m > 1) s = substr(s, 1, length(s) - 1); printf "%.0f", s * m }'
}

to_bits_per_s() {  # 1gbit -> 1e9 (decimal units, as tc reads rates)
  awk -v s="$1" 'BEGIN { s = tolower(s); m = 1;
    if (s ~ /kbit$/) m = 1e3; else if (s ~ /mbit$/) m = 1e6; else if (s ~ /gbit$/) m = 1e9;
    sub(/[a-z]+$/, "", s); printf "%.0f", s * m }'
}

link_goodput() {  # link_goodput N -> Mbit/s of the slowest of N iperf3 flows h_i -> h_(i+1), or "-"
  local n=$1 i j servers=() clients=() dir
  command -v iperf3 > /dev/null || { echo -; return; }
  dir=$(mktemp -d)
  for ((i = 0; i < n; i++)); do
    j=$(((i + 1) % n))
    ip netns exec "${TAG}h$j" timeout $((LINK_SECS + 30)) iperf3 -s -1 -p $((5300 + i)) > /dev/null 2>&1 &
    servers+=($!)
  done
  sleep 0.5
  for ((i = 0; i < n; i++)); do
    j=$(((i + 1) % n))
    ip netns exec "${TAG}h$i" timeout $((LINK_SECS + 30)) iperf3 -c "$SUBNET.$((j + 1))" -p $((5300 + i)) -t "$LINK_SECS" -O 1 -f m > "$dir/$i" 2>&1 &
    clients+=($!)
  done
  for p in "${clients[@]}"; do wait "$p" || true; done
  for p in "${servers[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  # The receiver's line: what arrived, which is what a ring step waits for.
  cat "$dir"/* | awk '/receiver/ { for (i = 1; i < NF; i++) if ($(i + 1) == "Mbits/sec") v = $i;
                                   if (min == "" || v < min) min = v }
                      END { if (min == "") print "-"; else print min }'
  rm -rf "$dir"
}

run() {  # run N ALGORITHM -> prints the median time in ms and the CPU idle % while it ran
  local n=$1 algo=$2 port=$((29500 + RANDOM % 1000)) i out
  ip netns exec "${TAG}h0" "$BIN" --store-server --store-host "$SUBNET.1" --store-port "$port" > /dev/null &
  local store=$!
  PIDS+=("$store")
  local workers=() before after
  out=$(mktemp)
  before=$(cpu_ticks)
  for ((i = 0; i < n; i++)); do
    ip netns exec "${TAG}h$i" "$BIN" --worker ringcomm --rank "$i" --ranks "$n" --store-host "$SUBNET.1" \
      --store-port "$port" --address "$SUBNET.$((i + 1))" --transport tcp --algorithms "$algo" \
      --sizes "$SIZE" --iters "$ITERS" --warmup 1 --timeout 600 > "$( [ "$i" = 0 ] && echo "$out" || echo /dev/null)" &
    workers+=($!)
    PIDS+=($!)
  done
  local failed=0
  for w in "${workers[@]}"; do wait "$w" || failed=1; done
  after=$(cpu_ticks)
  kill "$store"; wait "$store" 2>/dev/null || true
  local ms
  ms=$(awk '/^RESULT/ { printf "%.1f", $6 / 1000 }' "$out")
  rm -f "$out"
  if [ "$failed" = 1 ] || [ -z "$ms" ]; then
    echo "ring_vs_ps: the $algo run on $n hosts failed" >&2
    exit 1
  fi
  echo "$ms $(echo "$before $after" | awk '{ printf "%.0f", 100 - 100 * ($3 - $1) / ($4 - $2) }')"
}

echo "one $SIZE all-reduce (float32 sum), one rank per emulated host, each link $RATE both ways; median of $ITERS"
echo "bound: 2(N-1)/N x $SIZE at $RATE; link: the same at the TCP goodput iperf3 measures in the ring's pattern"
printf '%-6s %9s %9s %8s %12s %10s %9s %11s %9s %11s %9s %6s\n' hosts ring_ms ps_ms ps/ring ring_vs_N=2 ps_vs_N=2 \
  bound_ms ring/bound link_Mbit link_ms ring/link idle%
bytes=$(to_bytes "$SIZE")
bits_per_s=$(to_bits_per_s "$RATE")
ring2="" ps2=""
for n in "${SIZES[@]}"; do
  make_hosts "$n"
  out=$(run "$n" ring)
  read -r r idle <<< "$out"
  out=$(run "$n" ps)
  read -r p _ <<< "$out"
  mbit=$(link_goodput "$n")
  drop_hosts
  [ -n "$ring2" ] || { ring2=$r; ps2=$p; }
  bound=$(echo "2 * ($n - 1) / $n * $bytes * 8 / $bits_per_s * 1000" | bc -l)
  if [ "$mbit" = - ]; then link=- ring_link=-; else
    link=$(printf '%.0f' "$(echo "2 * ($n - 1) / $n * $bytes * 8 / ($mbit * 1000000) * 1000" | bc -l)")
    ring_link=$(printf '%.2f' "$(echo "$r / $link" | bc -l)")
  fi
  printf '%-6s %9s %9s %8.2f %12.2f %10.2f %9.0f %11.2f %9s %11s %9s %6s\n' "$n" "$r" "$p" "$(echo "$p / $r" | bc -l)" \
    "$(echo "$r / $ring2" | bc -l)" "$(echo "$p / $ps2" | bc -l)" "$bound" "$(echo "$r / $bound" | bc -l)" \
    "$mbit" "$link" "$ring_link" "$idle"
done
