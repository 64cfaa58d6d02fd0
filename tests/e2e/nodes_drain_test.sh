#!/usr/bin/env bash
# The node lifecycle with a real server and two agents:
#  1. a cordoned node gets nothing new: a job that only it could run waits,
#     saying why; `nodes` shows the cordon; uncordon lets the job run there;
#  2. `nodes drain` under a running 2-worker training gang: the gang
#     checkpoints, stops, and restarts on the other node from its checkpoint
#     (a new attempt, not counted as a restart); the command returns once the
#     node is empty; the job succeeds; the drained node still gets nothing new;
#  3. only admins change nodes; `nodes delete` refuses a node still heard from,
#     and forgets one whose agent is gone.
source "$(dirname "$0")/lib.sh"
: "${RINGMASTER_TRAIN:?set RINGMASTER_TRAIN}"
trap 'rc=$?; set +e; stop_agents; (exit $rc); cleanup' EXIT

start_server
start_agent node-a 32600-32649 "$SANDBOXES"
start_agent node-b 32650-32699 "$SANDBOXES"
await_nodes 2
pass "a server and two agents (node-a, node-b)"

# ---- 1. cordon
rmc nodes cordon node-b --reason "disk replacement" 2> /dev/null
rmc nodes | grep -q "node-b .*ready (cordoned: disk replacement)" || { rmc nodes; fail "nodes does not show the cordon"; }
ONLY_B=$(jq -n '{name: "only-b", node_selector: {zone: "b"}, resources: {cpu: 0.1, memory: "16Mi"}, command: "echo on b"}' |
  rmc submit --no-workdir -)
ANY=$(jq -n '{name: "any", resources: {cpu: 0.1, memory: "16Mi"}, command: "echo anywhere"}' | rmc submit --no-workdir -)
rmc wait "$ANY" --timeout 30 > /dev/null || { rmc show "$ANY"; fail "job $ANY did not run"; }
[ "$(rmc show "$ANY" --json | jq -r '.tasks[0].node')" = node-a ] || fail "job $ANY ran on the cordoned node"
wait_reason "$ONLY_B" "node node-b is cordoned: disk replacement" 30
[ "$(job_field "$ONLY_B" state)" = PENDING ] || fail "job $ONLY_B is not pending"
pass "cordoned node-b gets nothing new: job $ONLY_B waits ($(job_field "$ONLY_B" reason))"
rmc nodes uncordon node-b 2> /dev/null
rmc wait "$ONLY_B" --timeout 30 > /dev/null || { rmc show "$ONLY_B"; fail "job $ONLY_B did not run after uncordon"; }
pass "uncordoned, node-b ran job $ONLY_B"

# ---- 2. drain under a running gang
ID=$(jq -n '{name: "drained-gang", kind: "distributed", replicas: 2, resources: {cpu: 1, memory: "1Gi"},
  command: ["ringmaster-train", "--model", "lenet5", "--epochs", "2", "--checkpoint-every", "100", "--threads", "1",
            "--progress", "none"]}' | rmc submit -)
for _ in $(seq 1 900); do [ -n "$(latest_checkpoint "$ID")" ] && break; sleep 0.1; done
BEFORE=$(latest_checkpoint "$ID")
[ -n "$BEFORE" ] || { rmc logs "$ID"; fail "job $ID uploaded no checkpoint in 90s"; }
SHOW=$(rmc show "$ID" --json)
[ "$(jq -r '[.tasks[].node] | unique | length' <<<"$SHOW")" = 1 ] || fail "the gang is not on one node: $SHOW"
NODE=$(jq -r '.tasks[0].node' <<<"$SHOW")
OTHER=$([ "$NODE" = node-a ] && echo node-b || echo node-a)
pass "job $ID trains on $NODE and has checkpoint $BEFORE"

rmc nodes drain "$NODE" --reason "kernel update" --timeout 120 2> "$DATA/drain.err" ||
  { cat "$DATA/drain.err"; rmc show "$ID"; fail "nodes drain $NODE did not finish"; }
grep -q "node $NODE is drained" "$DATA/drain.err" || fail "drain did not say the node is empty: $(cat "$DATA/drain.err")"
[ "$(rmc nodes --json | jq --arg n "$NODE" '.nodes[] | select(.name == $n) | .allocated.tasks')" = 0 ] ||
  fail "$NODE still holds tasks after the drain"
rmc nodes | grep -q "$NODE .*ready (drained: kernel update)" || { rmc nodes; fail "nodes does not show $NODE drained"; }
pass "nodes drain $NODE returned with the node empty"

rmc wait "$ID" --timeout 300 > /dev/null || { rmc show "$ID"; rmc logs "$ID" | tail -20; fail "job $ID did not succeed"; }
SHOW=$(rmc show "$ID" --json)
[ "$(jq -r '[.tasks[].node] | unique | join(",")' <<<"$SHOW")" = "$OTHER" ] ||
  fail "job $ID ended on $(jq -c '[.tasks[].node]' <<<"$SHOW"), not on $OTHER"
[ "$(jq -r '[.tasks[].attempt] | unique | join(",")' <<<"$SHOW")" = 2 ] || fail "not on attempt 2: $(jq -c '[.tasks[].attempt]' <<<"$SHOW")"
[ "$(jq -r .restarts <<<"$SHOW")" = 0 ] || fail "the move was counted as a restart"
jq -e --arg n "$NODE" '[.events[] | select(.reason | startswith("moving off node \($n), which is draining"))] | length >= 1' \
  <<<"$SHOW" > /dev/null || { rmc show "$ID"; fail "no event says why the gang moved"; }
LOGS=$(rmc logs "$ID")
grep -q "^\[0\] resuming from .*ckpt-[0-9]* (step [1-9][0-9]*" <<<"$LOGS" ||
  fail "the moved gang did not resume from a checkpoint: $(grep -v '^\[.\] epoch' <<<"$LOGS" | head -20)"
grep -q "^\[0\] final test accuracy" <<<"$LOGS" || fail "no final accuracy"
pass "the gang moved to $OTHER, resumed from $(grep -o 'ckpt-[0-9]*' <<<"$(grep resuming <<<"$LOGS")" | head -1) on attempt 2, and succeeded"

LATE=$(jq -n '{name: "late", resources: {cpu: 0.1, memory: "16Mi"}, command: "true"}' | rmc submit --no-workdir -)
rmc wait "$LATE" --timeout 30 > /dev/null || fail "job $LATE did not run"
[ "$(rmc show "$LATE" --json | jq -r '.tasks[0].node')" = "$OTHER" ] || fail "the drained node got new work"
pass "the drained node gets nothing new (job $LATE ran on $OTHER)"

# ---- 3. who may, and delete
rmc users create carol > /dev/null 2>&1
CAROL=$(rmc tokens create --user carol)
if RINGMASTER_TOKEN=$CAROL rmc nodes cordon "$OTHER" 2> "$DATA/carol.err"; then fail "a user cordoned a node"; fi
grep -q "admin" "$DATA/carol.err" || fail "a user's cordon: $(cat "$DATA/carol.err")"
if rmc nodes delete --force "$NODE" 2> "$DATA/del.err"; then fail "a node still heard from was deleted"; fi
grep -q "is still heard from" "$DATA/del.err" || fail "delete of a live node: $(cat "$DATA/del.err")"
kill -TERM "${AGENT_PID[$NODE]}"
wait "${AGENT_PID[$NODE]}" 2>/dev/null || true
unset "AGENT_PID[$NODE]"
for _ in $(seq 1 300); do rmc nodes | grep -q "$NODE .*unreachable" && break; sleep 0.1; done
rmc nodes delete "$NODE" 2> /dev/null || fail "nodes delete $NODE failed once its agent was gone"
if rmc nodes | grep -q " $NODE "; then fail "$NODE is still listed"; fi
pass "only admins change nodes; delete refuses a live node and forgets one whose agent stopped"
echo "nodes_drain_test: all passed"
