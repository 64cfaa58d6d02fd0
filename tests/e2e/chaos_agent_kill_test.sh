#!/usr/bin/env bash
# Chaos: kill -9 of the agent, again and again, while it ships a task's log
# and metrics. A standalone server and one agent (process executor); a job
# prints 600 numbered log lines and appends 600 numbered metrics records,
# interleaved, for about 25 s. The agent is killed with SIGKILL $KILLS times,
# each time at a random moment after the previous agent has shipped more of
# both, and restarted on the same data dir after a short pause. Then:
#  - the task was re-adopted each time, never restarted (same task and
#    attempt, restarts 0), and the job succeeds;
#  - its log (`ringmaster logs`) is every line exactly once, in order;
#  - its metrics (GET /api/v1/jobs/ID/metrics) are every step exactly once,
#    in order, all of that one attempt.
source "$(dirname "$0")/lib.sh"
N=600 KILLS=5 PORTS=32800-32819
trap 'rc=$?; set +e; stop_agents
  if [ $rc -ne 0 ] && [ -f "$DATA/agent-node-a.log" ]; then
    echo "---- agent-node-a.log (last 30 lines)" >&2; tail -n 30 "$DATA/agent-node-a.log" >&2; fi
  (exit $rc); cleanup' EXIT

start_server
start_agent node-a "$PORTS" "$SANDBOXES"
await_nodes 1
AUTH="Authorization: Bearer $(cat "$DATA/admin.token")"

PROG='import json, os, time
m = open(os.environ["RINGMASTER_METRICS_FILE"], "a")
for i in range(1, '$N' + 1):
    print(f"line {i}", flush=True)
    m.write(json.dumps({"kind": "step", "step": i, "loss": round(1.0 / i, 6)}) + "\n")
    m.flush()
    time.sleep(0.04)'
ID=$(jq -n --arg p "$PROG" '{name: "chatty", command: ["/usr/bin/python3", "-c", $p],
  resources: {cpu: 0.5, memory: "64Mi"}}' | rmc submit --no-workdir -)
wait_state "$ID" RUNNING 60
KEY=$(task_key "$ID")

# What the server holds so far: log lines, and the newest metrics step (0 if none).
log_lines() { rmc logs "$ID" | wc -l; }
metrics_step() { curl -sf -H "$AUTH" "$URL/api/v1/jobs/$ID/metrics?limit=0" | jq -r '.latest.step // 0'; }
# shipped_past L S: waits (a hang guard) until the server holds more than L lines and a step past S.
shipped_past() {
  for _ in $(seq 1 300); do
    [ "$(log_lines)" -gt "$1" ] && [ "$(metrics_step)" -gt "$2" ] && return 0
    sleep 0.1
  done
  rmc show "$ID"
  fail "nothing more of job $ID shipped in 30 s (log has $(log_lines) lines, metrics step $(metrics_step))"
}

LINES=0 STEP=0
for k in $(seq 1 "$KILLS"); do
  shipped_past "$LINES" "$STEP"
  sleep "0.$(printf %03d $((RANDOM % 1000)))"  # somewhere within the next ticks' shipping
  LINES=$(log_lines) STEP=$(metrics_step)
  [ "$(job_field "$ID" state)" = RUNNING ] && [ "$LINES" -lt "$N" ] ||
    fail "job $ID ended (or shipped all $N lines) before kill $k of $KILLS: the job is too short for this machine"
  kill -KILL "${AGENT_PID[node-a]}"
  wait "${AGENT_PID[node-a]}" 2>/dev/null || true
  echo "kill $k: agent killed -9 with $LINES log lines and metrics step $STEP on the server"
  sleep "0.$((5 + RANDOM % 5))"
  start_agent node-a "$PORTS" "$SANDBOXES"
done
pass "agent killed -9 $KILLS times while job $ID shipped, restarted after each"

rmc wait "$ID" --timeout 120 > /dev/null || { rmc show "$ID"; fail "job $ID did not succeed after the agent's restarts"; }
[ "$(task_key "$ID")" = "$KEY" ] && [ "$(job_field "$ID" restarts)" = 0 ] ||
  fail "job $ID was restarted (task $(task_key "$ID"), was $KEY; restarts $(job_field "$ID" restarts)), not re-adopted"
ADOPTED=$(grep -c "re-adopting task ${KEY%.*} (attempt ${KEY#*.})" "$DATA/agent-node-a.log" || true)
[ "$ADOPTED" -ge "$KILLS" ] || fail "the agents re-adopted task $KEY $ADOPTED times, not $KILLS"
pass "job $ID succeeded; task $KEY was re-adopted $ADOPTED times, never restarted"

# ---- the log: every line exactly once, in order
rmc logs "$ID" > "$DATA/got.log"
seq 1 "$N" | sed 's/^/[0] line /' > "$DATA/want.log"
DUP=$(sort "$DATA/got.log" | uniq -d | head -5)
MISSING=$(comm -13 <(sort "$DATA/got.log") <(sort "$DATA/want.log") | head -5)
DIFF=$(diff "$DATA/want.log" "$DATA/got.log" | head -20) ||
  fail "job $ID's log is not each line exactly once, in order ($(wc -l < "$DATA/got.log") lines; duplicated: ${DUP:-none}; missing: ${MISSING:-none}): $DIFF"
pass "job $ID's log holds its $N lines, each exactly once, in order"

# ---- the metrics: every step exactly once, in order, of that one attempt
curl -sf -H "$AUTH" "$URL/api/v1/jobs/$ID/metrics?limit=100000" > "$DATA/metrics.json" || fail "GET metrics of job $ID failed"
FMT='"\(.attempt) \(.kind) \(.step) \(.loss)"'
jq -r ".series[] | $FMT" "$DATA/metrics.json" > "$DATA/got.metrics"
python3 -c 'import json, sys
for i in range(1, int(sys.argv[2]) + 1):
    print(json.dumps({"attempt": int(sys.argv[1]), "kind": "step", "step": i, "loss": round(1.0 / i, 6)}))' \
  "${KEY#*.}" "$N" | jq -r "$FMT" > "$DATA/want.metrics"
DUP=$(awk '{print $3}' "$DATA/got.metrics" | sort -n | uniq -d | head -5)
MISSING=$(comm -13 <(awk '{print $3}' "$DATA/got.metrics" | sort) <(seq 1 "$N" | sort) | head -5)
DIFF=$(diff "$DATA/want.metrics" "$DATA/got.metrics" | head -20) ||
  fail "job $ID's metrics are not each step exactly once, in order ($(wc -l < "$DATA/got.metrics") records; duplicated steps: ${DUP:-none}; missing: ${MISSING:-none}): $DIFF"
[ "$(jq -r .latest.step "$DATA/metrics.json")" = "$N" ] || fail "latest.step is $(jq -r .latest.step "$DATA/metrics.json"), not $N"
pass "job $ID's metrics hold its $N steps, each exactly once, in order, all of attempt ${KEY#*.}"
echo "chaos_agent_kill_test: all passed"
