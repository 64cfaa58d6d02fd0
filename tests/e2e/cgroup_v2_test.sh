#!/usr/bin/env bash
# An agent on a cgroup v2 host, against the fake cgroupfs (this host's
# memory, cpu, pids and io controllers are bound to cgroup v1): a real
# server, and an agent started with --cgroup-root on the fake's mount and
# --executors process,runc,docker (the tests' dockerd, cgroupfs driver).
#  1. it registers offering all three executors (an agent on v1 only used to
#     refuse runc and docker here);
#  2. a process task runs in its v2 cgroup: memory.max, memory.swap.max,
#     cpu.max, pids.max and io.max on the sandbox's disk as the job asked,
#     the task's pid in cgroup.procs, its CPU and memory sampled from the
#     fake's cpu.stat and memory.current; the cgroup is gone with the task;
#  3. 200 MiB under `memory: 64Mi` is killed by the fake's memory.max and
#     the task ends FAILED "out of memory (limit 64Mi)" through memory.events.
source "$(dirname "$0")/lib.sh"
: "${FAKE_CGROUPFS:?set FAKE_CGROUPFS to the fake-cgroupfs binary}"
: "${DOCKER_SOCK:?set DOCKER_SOCK to the socket of the test dockerd}"
[ -e /dev/fuse ] || { echo "SKIP: no /dev/fuse for the fake cgroupfs"; exit 0; }
CG=$DATA/cgroup
FAKE_PID=""
stop_fake() {
  umount -l "$CG" 2>/dev/null || true
  if [ -n "$FAKE_PID" ]; then kill "$FAKE_PID" 2>/dev/null || true; wait "$FAKE_PID" 2>/dev/null || true; fi
  return 0
}
trap 'rc=$?; set +e; stop_agents; stop_fake; (exit $rc); cleanup' EXIT

mkdir -p "$CG"
"$FAKE_CGROUPFS" "$CG" >> "$DATA/fake-cgroupfs.log" 2>&1 &
FAKE_PID=$!
for _ in $(seq 1 100); do [ -e "$CG/cgroup.controllers" ] && break; sleep 0.05; done
[ "$(cat "$CG/cgroup.controllers")" = "cpu io memory pids" ] || fail "the fake cgroupfs did not mount at $CG"

start_server
start_agent node-a 32760-32779 "$SANDBOXES" --cgroup-root "$CG" --executors process,runc,docker --docker-socket "$DOCKER_SOCK" --task-network host
await_nodes 1
rmc nodes --json | jq -e '(.nodes[0].executors | split(",") | sort) == ["docker", "process", "runc"]' > /dev/null ||
  { rmc nodes --json; fail "node-a does not offer process,runc,docker on cgroup v2"; }
grep -q "tasks' limits: cgroup v2 at $CG" "$DATA/agent-node-a.log" || fail "the agent did not say it uses cgroup v2 at $CG"
pass "on cgroup v2 (the fake at --cgroup-root) the agent offers process, runc and docker"
INST=$(cat "$DATA/agent-node-a/sandbox-instance")
for d in "$CG" "$CG/ringmaster" "$CG/ringmaster/$INST"; do
  [ "$(cat "$d/cgroup.subtree_control")" = "cpu io memory pids" ] || fail "$d enables \"$(cat "$d/cgroup.subtree_control")\""
done
pass "cpu io memory pids enabled down to /ringmaster/$INST"

# ---- 2. a task's limits in its v2 cgroup
ID=$(jq -n '{name: "v2", command: ["/usr/bin/python3", "-c",
  "import time\nb = bytearray(48 * 2**20)\nt = time.time()\nwhile time.time() - t < 6: pass\nprint(\"done\")"],
  resources: {cpu: 0.5, memory: "256Mi", pids: 64, io: {write_bps: "10Mi", read_iops: 1000}}}' | rmc submit --no-workdir -)
wait_state "$ID" RUNNING 60
KEY=$(task_key "$ID")
T=$CG/ringmaster/$INST/$KEY
for _ in $(seq 1 50); do [ -n "$(cat "$T/cgroup.procs" 2>/dev/null)" ] && break; sleep 0.1; done
check() { [ "$(cat "$T/$1")" = "$2" ] || fail "$T/$1 is \"$(cat "$T/$1")\", not \"$2\""; }
check memory.max 268435456
check memory.high max
check memory.swap.max 0
check memory.oom.group 1
check cpu.max "50000 100000"
check pids.max 64
DISK=$(grep -o 'io limits on disk [0-9:]*' "$DATA/agent-node-a.log" | awk '{print $5}' || true)
if [ -n "$DISK" ]; then
  check io.max "$DISK rbps=max wbps=10485760 riops=1000 wiops=max"
  pass "io.max on the sandbox's disk $DISK: $(cat "$T/io.max")"
else
  grep -q "no io limits" "$DATA/agent-node-a.log" || fail "the agent says nothing of io limits"
fi
PIDS=$(cat "$T/cgroup.procs")
[ -n "$PIDS" ] || fail "no process in the task's cgroup $T"
pass "$KEY runs in $T with memory.max 256Mi, cpu.max 50000/100000, pids.max 64 (pids: $(tr '\n' ' ' <<<"$PIDS"))"

# The agent samples the task from the fake's files: CPU from cpu.stat's
# usage_usec, memory from memory.current (48 MiB resident at least).
usage() { curl -sf -H "Authorization: Bearer $(cat "$DATA/admin.token")" "$(jq -r .url "$DATA/server.json")/api/v1/jobs/$ID/usage?since=30"; }
SAMPLED=""
for _ in $(seq 1 50); do
  USAGE=$(usage) || true
  if jq -e '[.tasks[0].series.cpu_cores // [] | .[][2]] | max // 0 | . > 0.3' <<<"$USAGE" > /dev/null &&
     jq -e '[.tasks[0].series.memory_bytes // [] | .[][2]] | max // 0 | . > 48 * 1048576' <<<"$USAGE" > /dev/null; then
    SAMPLED=1
    break
  fi
  sleep 0.2
done
[ -n "$SAMPLED" ] || fail "the agent's samples do not show the task's CPU and memory from the fake: $USAGE"
pass "the agent sampled the task's CPU and memory from its v2 cgroup"
wait_state "$ID" SUCCEEDED 60
for _ in $(seq 1 100); do [ ! -e "$T" ] && break; sleep 0.1; done
[ ! -e "$T" ] || fail "the task's cgroup $T outlived it by 10 s"
pass "the cgroup is gone with the task"

# ---- 3. out of memory through memory.events
ID=$(jq -n '{name: "oom", command: ["/usr/bin/python3", "-c", "import time\nb = bytearray(200 * 2**20)\ntime.sleep(30)"],
  resources: {cpu: 1, memory: "64Mi"}}' | rmc submit --no-workdir -)
wait_state "$ID" FAILED 60
REASON=$(rmc show "$ID" --json | jq -r '.tasks[0].reason')
grep -q '^out of memory (limit 64Mi)' <<<"$REASON" || fail "oom: reason is \"$REASON\""
pass "200 MiB under memory: 64Mi ends FAILED: $REASON"
