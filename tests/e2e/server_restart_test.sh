#!/usr/bin/env bash
# Training survives the server: a 2-worker training job on a standalone server
# and two agents (the defaults: agents fence after 5 minutes without the
# server) keeps running through kill -9 of the server and a restart 60 s later:
#  - its workers are the same processes before, during and after: no fencing,
#    no restart (every task on attempt 1, the job's restarts 0, no LOST);
#  - they trained on while the server was away (their logs grew meanwhile);
#  - its log, shipped after the restart, has no gap and no duplicate: rank 0's
#    progress lines for every epoch, each once, in order;
#  - it succeeds.
source "$(dirname "$0")/lib.sh"
: "${RINGMASTER_TRAIN:?set RINGMASTER_TRAIN}"  # built; each agent stages it for its tasks
trap 'rc=$?; set +e; stop_agents; (exit $rc); cleanup' EXIT

SERVER_PORT=$(free_port)  # the restarted server listens where the agents look for it
start_server
start_agent node-a 32400-32449 "$SANDBOXES"
start_agent node-b 32450-32499 "$SANDBOXES"
await_nodes 2
pass "a server on port $SERVER_PORT and two agents"

EPOCHS=20
ID=$(submit_train2 outlives-server $EPOCHS)
wait_state "$ID" RUNNING 60
for _ in $(seq 1 600); do rmc logs "$ID" | grep -q '^\[0\] epoch 1/[0-9]* .* 20%' && break; sleep 0.1; done
rmc logs "$ID" | grep -q '^\[0\] epoch 1/[0-9]* .* 20%' || { rmc logs "$ID"; fail "job $ID shows no progress"; }
SHOW=$(rmc show "$ID" --json)
[ "$(jq '[.tasks[].node] | unique | length' <<<"$SHOW")" = 2 ] || fail "the workers are not on two nodes: $SHOW"
# Each worker's process, as the shim recorded it: "node key pid starttime".
workers() {
  local node key pid
  jq -r '.tasks[] | "\(.node) \(.id).\(.attempt)"' <<<"$SHOW" | while read -r node key; do
    pid=$(cat "$DATA/agent-$node/tasks/$key/task.pid")
    echo "$node $key $pid $(cut -d' ' -f22 "/proc/$pid/stat" 2>/dev/null)"
  done
}
BEFORE=$(workers)
grep -q ' [0-9][0-9]*$' <<<"$BEFORE" || fail "no worker processes: $BEFORE"
log_bytes() { cat "$DATA"/agent-*/tasks/*/output.log 2>/dev/null | wc -c; }

kill -KILL "$UP_PID"
wait "$UP_PID" 2>/dev/null || true
UP_PID=""
KILLED_AT=$(date +%s)
BYTES_AT_KILL=$(log_bytes)
pass "server killed with SIGKILL while job $ID trains (workers: $(awk '{print $1 "/" $3}' <<<"$BEFORE" | tr '\n' ' '))"

sleep 60
if curl -sf "http://127.0.0.1:$SERVER_PORT/healthz" > /dev/null; then fail "a server still answers after kill -9"; fi
DURING=$(workers)
[ "$DURING" = "$BEFORE" ] || fail "the workers changed while the server was away: before $BEFORE, now $DURING"
[ "$(log_bytes)" -gt "$BYTES_AT_KILL" ] || fail "the workers wrote nothing while the server was away"
if grep -q "no answer from the server" "$DATA"/agent-node-*.log; then fail "an agent fenced its tasks: $(grep -h 'no answer' "$DATA"/agent-node-*.log)"; fi
pass "60 s without a server: the same workers train on, no agent fenced"

start_server
pass "server restarted on port $SERVER_PORT after $(( $(date +%s) - KILLED_AT )) s"
rmc wait "$ID" --timeout 600 > /dev/null || { rmc show "$ID"; rmc logs "$ID" | tail -20; fail "job $ID did not succeed"; }
SHOW=$(rmc show "$ID" --json)
[ "$(jq -r .restarts <<<"$SHOW")" = 0 ] || fail "job $ID was restarted: $(rmc show "$ID")"
[ "$(jq -r '[.tasks[].attempt] | unique | join(",")' <<<"$SHOW")" = 1 ] || fail "tasks not on attempt 1: $(jq -c '[.tasks[].attempt]' <<<"$SHOW")"
if rmc show "$ID" | grep -q "LOST"; then fail "a task was LOST: $(rmc show "$ID")"; fi

LOGS=$(rmc logs "$ID")
# Every progress line of rank 0, in order: epoch e at 10%, 20%, ... 90%.
GOT=$(sed -n 's/^\[0\] epoch \([0-9]*\)\/[0-9]* \[[#.]*\] *\([0-9]*\)%.*/\1 \2/p' <<<"$LOGS")
WANT=$(for e in $(seq 1 $EPOCHS); do for p in 10 20 30 40 50 60 70 80 90; do echo "$e $p"; done; done)
[ "$GOT" = "$WANT" ] || fail "rank 0's progress has a gap or a duplicate: $(diff <(echo "$WANT") <(echo "$GOT") | head -5)"
SUMMARIES=$(grep -c "^\[0\] epoch [0-9]*/$EPOCHS  train loss" <<<"$LOGS")
[ "$SUMMARIES" = "$EPOCHS" ] || fail "$SUMMARIES epoch summaries of $EPOCHS"
DUP=$(sort <<<"$LOGS" | uniq -d)
[ -z "$DUP" ] || fail "duplicated log lines: $(head -3 <<<"$DUP")"
grep -q "^\[0\] final test accuracy" <<<"$LOGS" || fail "no final accuracy: $(tail -5 <<<"$LOGS")"
pass "job $ID succeeded on its first attempt; its log holds every epoch's progress once, in order, $(grep -c . <<<"$LOGS") lines"
echo "server_restart_test: all passed"
