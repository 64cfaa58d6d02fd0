#!/usr/bin/env bash
# Server and agent as separate processes: `ringmaster server` and
# `ringmaster agent --server URL --token-file F`. kill -9 of the server
# while a job runs; the agent keeps the task running and retries; a server
# restarted on the same data dir and port resumes tracking it to SUCCEEDED.
source "$(dirname "$0")/lib.sh"
AGENT_PID=""
stop_agent() {
  if [ -n "$AGENT_PID" ] && kill -0 "$AGENT_PID" 2>/dev/null; then kill -TERM "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null || true; fi
}
trap 'rc=$?; set +e; stop_agent; (exit $rc); cleanup' EXIT

start_server() {  # start_server PORT
  "$RM" server --data "$DATA" --port "$1" >> "$DATA/server.log" 2>&1 &
  UP_PID=$!
  for _ in $(seq 1 100); do
    [ -f "$DATA/server.json" ] && curl -sf "$(jq -r .url "$DATA/server.json")/healthz" > /dev/null && return 0
    sleep 0.1
  done
  cat "$DATA/server.log"; fail "server did not start"
}

start_server 0
URL=$(jq -r .url "$DATA/server.json")
PORT=${URL##*:}
rmc tokens create --scope agent --node split-node > "$DATA/agent.token"
"$RM" agent --server "$URL" --token-file "$DATA/agent.token" --data "$DATA/agent" --node-name split-node \
  --sandbox-root "$SANDBOXES" --cpus 2 --memory 2Gi >> "$DATA/agent.log" 2>&1 &
AGENT_PID=$!
for _ in $(seq 1 100); do rmc nodes 2>/dev/null | grep -q 'split-node  ready' && break; sleep 0.1; done
rmc nodes | grep -q 'split-node  ready  2    2Gi' || { rmc nodes; fail "agent did not register with --cpus 2 --memory 2Gi"; }
pass "agent registered its node as split-node with 2 cpus and 2Gi"

ID=$(echo '{"name": "split", "command": "echo start; sleep 3; echo end", "resources": {"cpu": 1}}' | rmc submit -)
wait_state "$ID" RUNNING 30
kill -KILL "$UP_PID"; wait "$UP_PID" 2>/dev/null || true
pass "server killed with SIGKILL while job $ID runs"
sleep 1
kill -0 "$AGENT_PID" || fail "the agent died with the server"
start_server "$PORT"
rmc wait "$ID" --timeout 60 || fail "job $ID did not succeed after the server restart"
LOGS=$(rmc logs "$ID")
grep -qx '\[0\] start' <<<"$LOGS" && grep -qx '\[0\] end' <<<"$LOGS" || fail "logs incomplete: $LOGS"
pass "restarted server resumed tracking job $ID under the live agent: SUCCEEDED, logs complete"
echo "split_test: all passed"
