#!/usr/bin/env bash
# Removes a cluster scripts/cluster/up.sh made: its agents and server (by
# the pids it recorded), every task they left running (by the pids their
# shims recorded, if they are still in the agent's cgroups; runc containers
# through runc), its Open vSwitch daemons (whose database goes with the
# state dir), and its namespaces, which takes every link, bridge and tunnel
# inside them along. A pid is signalled only while it is still what was
# started (the same pid and start time, procs.sh), and down.sh returns only
# once what it stopped is gone (bounded: 10 s after SIGKILL, which a process
# cannot outlive), so a caller that looks right after finds nothing exiting.
# Exits non-zero if anything it made is still there.
#
#   scripts/cluster/down.sh [--state DIR] [--keep-state]
set -uo pipefail
STATE="" KEEP=""
while [ $# -gt 0 ]; do
  case $1 in
    --state) STATE=$2; shift 2 ;;
    --keep-state) KEEP=1; shift ;;
    *) echo "down.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/procs.sh"
STATE=${STATE:-/tmp/ringmaster-cluster-rmc}
[ -f "$STATE/name" ] || { echo "down.sh: $STATE is not a cluster's state dir" >&2; exit 2; }
NAME=$(cat "$STATE/name")

# ours WHAT PID START: PID is still the daemon up.sh recorded. By its start
# time; a state dir of an older up.sh has none: then by its command line
# (which names this state dir) or, for OVS, its name.
ours() {
  [ -n "$3" ] && { proc_running "$2" "$3"; return; }
  local f
  f=$(proc_stat "$2") || return 1
  [ "${f%% *}" != Z ] || return 1
  tr '\0' ' ' < "/proc/$2/cmdline" 2>/dev/null | grep -qF -- "$STATE/" || [ "$(cat "/proc/$2/comm" 2>/dev/null)" = "$1" ]
}
# await_gone SECONDS: until no recorded daemon runs, at most SECONDS.
await_gone() {
  local what pid start left
  for _ in $(seq 1 $(($1 * 10))); do
    left=0
    while read -r what pid start; do ours "$what" "$pid" "$start" && left=1; done < "$STATE/pids"
    [ "$left" = 0 ] && return 0
    sleep 0.1
  done
  return 1
}
stop_pid() {  # stop_pid WHAT PID START: TERM, KILL after 10 s, and wait until it is gone
  ours "$@" || return 0
  kill -TERM "$2" 2>/dev/null
  for _ in $(seq 1 100); do ours "$@" || return 0; sleep 0.1; done
  kill -KILL "$2" 2>/dev/null
  # A killed process still exits (unmaps, closes, is reaped): not long, but not at once.
  for _ in $(seq 1 100); do ours "$@" || return 0; sleep 0.1; done
}

# Agents first (tasks outlive them), then the server.
grep '^agent-' "$STATE/pids" 2>/dev/null | while read -r what pid start; do stop_pid "$what" "$pid" "$start"; done
grep '^server ' "$STATE/pids" 2>/dev/null | while read -r what pid start; do stop_pid "$what" "$pid" "$start"; done
# Tasks the agents left: runc's containers, then every shim and task process group.
for a in "$STATE"/h*/agent; do
  [ -d "$a" ] || continue
  if [ -d "$a/runc" ] && command -v runc > /dev/null; then
    for root in "$a"/runc "$a"/runc/*/; do
      [ -d "$root" ] || continue
      for id in $(runc --root "$root" list -q 2>/dev/null); do runc --root "$root" delete --force "$id" 2>/dev/null; done
    done
  fi
  # Only processes still in this agent's cgroups: a pid file may outlive its process.
  inst=$(cat "$a/sandbox-instance" 2>/dev/null)
  in_agent() { [ -n "$inst" ] && grep -q "/ringmaster/$inst/" "/proc/$1/cgroup" 2>/dev/null; }
  for f in "$a"/tasks/*/task.pid; do [ -f "$f" ] && in_agent "$(cat "$f")" && kill -KILL -- "-$(cat "$f")" 2>/dev/null; done
  for f in "$a"/tasks/*/shim.pid; do [ -f "$f" ] && in_agent "$(cat "$f")" && kill -KILL "$(cat "$f")" 2>/dev/null; done
  # Until the killed ones have left the agent's cgroups (bounded, as above).
  for _ in $(seq 1 100); do
    [ -z "$inst" ] || [ -z "$(cat /sys/fs/cgroup/pids/ringmaster/"$inst"/*/cgroup.procs \
                               /sys/fs/cgroup/pids/ringmaster/"$inst"/*/*/cgroup.procs 2>/dev/null)" ] && break
    sleep 0.1
  done
  # The overlay mounts of runc tasks (their root filesystems).
  grep -o " $a/[^ ]*/rootfs/merged " /proc/self/mountinfo 2>/dev/null | while read -r m; do umount -l "$m" 2>/dev/null; done
  # The jobs' network namespaces (agent --task-network isolated), then the mount that holds them.
  grep -o " $a/netns/rmj-[0-9-]* " /proc/self/mountinfo 2>/dev/null | while read -r m; do umount -l "$m" 2>/dev/null; done
  if grep -q " $a/netns " /proc/self/mountinfo 2>/dev/null; then umount -l "$a/netns" 2>/dev/null || true; fi
done
# Open vSwitch: the daemons it started.
grep -E '^ovs(db-server|-vswitchd) ' "$STATE/pids" 2>/dev/null | sort -r | while read -r what pid start; do
  stop_pid "$what" "$pid" "$start"
done
await_gone 10
# The namespaces: with them go eth0, the bridges, vxlan and every veth.
for ns in $(ip netns list | awk '{print $1}' | grep -E "^$NAME-(sw|h[0-9]+)$"); do ip netns del "$ns"; done
# The agents' cgroups (empty once their tasks ended).
for a in "$STATE"/h*/agent; do
  inst=$(cat "$a/sandbox-instance" 2>/dev/null) || continue
  for c in /sys/fs/cgroup/*/ringmaster/"$inst"; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
done

# What is left of it?
left=0
ip netns list | grep -E "^$NAME-(sw|h[0-9]+)( |$)" && { echo "down.sh: namespaces remain" >&2; left=1; }
ip link show | grep -E ": $NAME[ab][0-9]+[@:]" && { echo "down.sh: links remain" >&2; left=1; }
while read -r what pid start; do
  if ours "$what" "$pid" "$start"; then
    echo "down.sh: $what (pid $pid) still runs" >&2
    left=1
  fi
done < "$STATE/pids"
for a in "$STATE"/h*/agent; do
  inst=$(cat "$a/sandbox-instance" 2>/dev/null) || continue
  for p in $(cat /sys/fs/cgroup/pids/ringmaster/"$inst"/*/cgroup.procs /sys/fs/cgroup/pids/ringmaster/"$inst"/*/*/cgroup.procs 2>/dev/null); do
    echo "down.sh: task process $p of $a still runs" >&2
    left=1
  done
done
[ "$left" = 0 ] || exit 1
[ -n "$KEEP" ] || rm -rf "$STATE"
echo "cluster $NAME is down"
