#!/usr/bin/env bash
# scripts/cluster/down.sh on processes alone (no namespaces, no images): the
# daemons a state dir records are stopped and *gone* when it returns, even one
# that takes its time to exit after SIGTERM and one that ignores SIGTERM until
# SIGKILL; a recorded pid whose start time is not the one recorded (the kernel
# gave the pid to another process) is left alone. The multi-host tests
# (cluster_test.sh) check the same after a real cluster.
set -euo pipefail
REPO=${REPO_ROOT:?set REPO_ROOT}
source "$REPO/scripts/cluster/procs.sh"
STATE=$(mktemp -d /tmp/rm-cluster-down.XXXXXX)
PIDS=()
cleanup() {
  local rc=$? p
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2> /dev/null || true; done
  rm -rf "$STATE"
  exit $rc
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "down$$" > "$STATE/name"
# A daemon that exits 2 s after SIGTERM, and one that exits only on SIGKILL.
bash -c 'trap "sleep 2; exit 0" TERM; while :; do sleep 0.1; done' "$STATE/slow" &
SLOW=$!
bash -c 'trap "" TERM; while :; do sleep 0.1; done' "$STATE/stubborn" &
STUBBORN=$!
# Not the cluster's: recorded with a start time that is not its own, as when
# the pid a daemon had is reused after it died (here by a process whose command
# line even names the state dir, as a new cluster's daemon in it would).
bash -c 'while :; do sleep 0.1; done' "$STATE/other" &
OTHER=$!
PIDS=("$SLOW" "$STUBBORN" "$OTHER")
sleep 0.2
{
  echo "agent-h1 $SLOW $(proc_start "$SLOW")"
  echo "server $STUBBORN $(proc_start "$STUBBORN")"
  echo "agent-h2 $OTHER $(($(proc_start "$OTHER") - 1))"
} > "$STATE/pids"

START=$(date +%s.%N)
bash "$REPO/scripts/cluster/down.sh" --state "$STATE" --keep-state > "$STATE/down.out" 2>&1 ||
  { cat "$STATE/down.out"; fail "down.sh failed"; }
TOOK=$(echo "$(date +%s.%N) - $START" | bc)
while read -r what pid start; do
  [ "$pid" = "$OTHER" ] && continue
  if proc_running "$pid" "$start"; then fail "$what (pid $pid) still runs when down.sh has returned"; fi
done < "$STATE/pids"
kill -0 "$OTHER" 2> /dev/null || fail "down.sh signalled pid $OTHER, whose start time is not the recorded one"
awk -v t="$TOOK" 'BEGIN { exit !(t >= 10) }' || fail "down.sh returned after ${TOOK}s: SIGKILL must come only after 10 s of SIGTERM"
echo "ok: down.sh returned after ${TOOK}s with the slow and the stubborn daemon gone, and left a reused pid alone"
