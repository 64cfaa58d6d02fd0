#!/usr/bin/env bash
# Fault tolerance with a real server and two agents on this machine:
#  1. kill -9 of one worker of a running 2-worker training job: the gang is
#     stopped and restarted as a whole (new attempt, new ringcomm generation),
#     resumes from its latest checkpoint, and succeeds.
#  2. a worker that hangs (SIGSTOP) in the middle of training: its peer's next
#     collective fails at ringcomm's deadline (RINGMASTER_COMM_TIMEOUT, 8 s
#     here) naming the rank, the gang restarts from its checkpoint and succeeds.
#  3. kill -9 of an agent together with its tasks (a host dying): once the
#     node has been silent for its fencing window (10 s here, --node-lost-after)
#     and a lease (10 s) more, its task is marked LOST, and the job reruns on
#     the other agent and succeeds.
source "$(dirname "$0")/lib.sh"
: "${RINGMASTER_TRAIN:?set RINGMASTER_TRAIN}"  # built; each agent stages it for its tasks
trap 'rc=$?; set +e; stop_agents; (exit $rc); cleanup' EXIT

start_server --node-lost-after 10
start_agent node-a 32200-32249 "$SANDBOXES"
start_agent node-b 32250-32299 "$SANDBOXES"
await_nodes 2
pass "a server and two agents (node-a, node-b)"

# Waits for a job's first checkpoint and prints its name.
await_checkpoint() {
  for _ in $(seq 1 600); do [ -n "$(latest_checkpoint "$1")" ] && break; sleep 0.1; done
  [ -n "$(latest_checkpoint "$1")" ] || { rmc logs "$1" >&2; fail "job $1 uploaded no checkpoint in 60s"; }
  latest_checkpoint "$1"
}
# Waits for a job to succeed after exactly one restart; prints its logs.
succeeds_after_one_restart() {
  rmc wait "$1" --timeout 180 > /dev/null || { rmc show "$1" >&2; rmc logs "$1" >&2; fail "job $1 did not succeed after $2"; }
  [ "$(job_field "$1" restarts)" = 1 ] || fail "job $1 restarted $(job_field "$1" restarts) times, not once"
  rmc logs "$1"
}
# Prints "TASK_KEY NODE" of a job's rank 1.
rank1_task() { rmc show "$1" --json | jq -r '.tasks[] | select(.rank == 1) | "\(.id).\(.attempt) \(.node)"'; }

# ---- 1. kill -9 of one worker
ID=$(jq -n '{name: "ft-train", kind: "distributed", replicas: 2, max_restarts: 2, resources: {cpu: 1, memory: "1Gi"},
  command: ["ringmaster-train", "--model", "mlp", "--epochs", "2", "--checkpoint-every", "100", "--threads", "1",
            "--progress", "none"]}' | rmc submit -)
BEFORE=$(await_checkpoint "$ID")
read -r KEY NODE <<<"$(rank1_task "$ID")"
PGID=$(cat "$DATA/agent-$NODE/tasks/$KEY/task.pid")
kill -KILL -- "-$PGID"
pass "rank 1 of job $ID (task $KEY on $NODE) killed with SIGKILL after checkpoint $BEFORE"
LOGS=$(succeeds_after_one_restart "$ID" "a worker was killed")
grep -q "^\[0\] resuming from .*ckpt-[0-9]* (step [1-9][0-9]*" <<<"$LOGS" || fail "the restarted gang did not resume from a checkpoint: $LOGS"
grep -q "^\[0\] final test accuracy" <<<"$LOGS" || fail "no final accuracy: $LOGS"
# The first exit the server hears of names the restart. Agents report an exit only after
# uploading the task's last checkpoint and outputs, so rank 0 (which fails at once, naming
# rank 1 as the one that died) may be heard of first; either way rank 1's fate is recorded.
SHOW=$(rmc show "$ID")
grep -q "restart 1 of 2 after rank 1 failed" <<<"$SHOW" ||
  { grep -q "restart 1 of 2 after rank 0 failed" <<<"$SHOW" && grep -q "rank 1 .*killed by signal 9" <<<"$SHOW" &&
    grep -q "^\[0\] .*rank 1 (host .*) died" <<<"$LOGS"; } ||
  { echo "$SHOW"; fail "neither the restart event nor rank 0's error names rank 1"; }
pass "the whole gang restarted once, resumed from $(grep -o 'ckpt-[0-9]*' <<<"$(grep resuming <<<"$LOGS")" | head -1), and succeeded"

# ---- 2. a worker hangs inside a collective
ID=$(jq -n '{name: "ft-hang", kind: "distributed", replicas: 2, max_restarts: 1, resources: {cpu: 1, memory: "1Gi"},
  env: {RINGMASTER_COMM_TIMEOUT: "8"},
  command: ["ringmaster-train", "--model", "lenet5", "--epochs", "1", "--checkpoint-every", "100", "--threads", "1",
            "--progress", "none"]}' | rmc submit -)
await_checkpoint "$ID" > /dev/null
read -r KEY NODE <<<"$(rank1_task "$ID")"
HUNG=$(cat "$DATA/agent-$NODE/tasks/$KEY/task.pid")
kill -STOP -- "-$HUNG"
pass "rank 1 of job $ID (task $KEY on $NODE) frozen with SIGSTOP mid-training"
LOGS=$(succeeds_after_one_restart "$ID" "a worker hung")
grep -q "^\[0\] .*timed out after 8.0 s waiting for rank 1" <<<"$LOGS" || fail "rank 0 did not name the hung rank 1: $LOGS"
grep -q "^\[0\] resuming from .*ckpt-[0-9]*" <<<"$LOGS" || fail "the restarted gang did not resume from a checkpoint: $LOGS"
rmc show "$ID" | grep -q "restart 1 of 1 after rank 0 failed" || { rmc show "$ID"; fail "no restart event after rank 0's timeout"; }
! kill -0 "$HUNG" 2>/dev/null || fail "the hung worker (pid $HUNG) was left behind"
pass "rank 0 timed out naming rank 1, the gang restarted from its checkpoint and succeeded"

# Node labels reach the scheduler: a node selector picks the agent started with --label zone=b.
ID=$(jq -n '{name: "zone-b", node_selector: {zone: "b"}, resources: {cpu: 0.1, memory: "16Mi"}, command: "true"}' | rmc submit -)
rmc wait "$ID" --timeout 30 > /dev/null || { rmc show "$ID"; fail "job $ID with node_selector zone=b did not run"; }
[ "$(rmc show "$ID" --json | jq -r '.tasks[0].node')" = node-b ] || fail "node_selector zone=b ran job $ID elsewhere"
pass "node_selector {zone: b} placed job $ID on node-b (agent --label zone=b)"

# ---- 3. kill -9 of an agent with its tasks (the host is gone)
ID=$(jq -n '{name: "ft-lost", replicas: 1, max_restarts: 1, resources: {cpu: 1, memory: "64Mi"},
  command: "echo attempt $RINGMASTER_ATTEMPT; sleep 4; echo done"}' | rmc submit -)
wait_state "$ID" RUNNING 30
NODE=$(rmc show "$ID" --json | jq -r '.tasks[0].node')
OTHER=$([ "$NODE" = node-a ] && echo node-b || echo node-a)
kill -KILL "${AGENT_PID[$NODE]}"
kill_tasks "$DATA/agent-$NODE"
pass "agent $NODE and its task killed with SIGKILL while job $ID runs"
rmc wait "$ID" --timeout 90 || { rmc show "$ID"; fail "job $ID did not succeed on the other agent"; }
SHOW=$(rmc show "$ID" --json)
[ "$(jq -r '.tasks[0].node' <<<"$SHOW")" = "$OTHER" ] || fail "job $ID ended on $(jq -r '.tasks[0].node' <<<"$SHOW"), not $OTHER"
[ "$(jq -r '.tasks[0].attempt' <<<"$SHOW")" = 2 ] || fail "job $ID is on attempt $(jq -r '.tasks[0].attempt' <<<"$SHOW")"
jq -e --arg n "$NODE" '[.events[] | select(.to == "LOST" and (.reason | startswith("node \($n) lost: no heartbeat")))] | length == 1' \
  <<<"$SHOW" > /dev/null || { rmc show "$ID"; fail "no LOST event naming $NODE"; }
pass "its task was marked LOST with the node and reran on $OTHER (attempt 2)"
echo "fault_test: all passed"
