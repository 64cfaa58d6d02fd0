#!/usr/bin/env bash
# Durability: kill -9 of `ringmaster up` (server and agent) while a job
# runs, then a restart on the same data dir: the job is still listed, its
# task is re-adopted, and it reaches SUCCEEDED with its whole output.
source "$(dirname "$0")/lib.sh"
start_up

write_spec "$DATA/slow.yaml" <<'YAML'
name: survives
replicas: 2
command: |
  echo "rank $RINGMASTER_RANK before"
  sleep 4
  echo "rank $RINGMASTER_RANK after"
resources: {cpu: 0.5, memory: 32Mi}
YAML
ID=$(rmc submit "$DATA/slow.yaml")
wait_state "$ID" RUNNING 30
for _ in $(seq 1 50); do rmc logs "$ID" | grep -q 'rank 1 before' && break; sleep 0.1; done

kill -KILL "$UP_PID"
wait "$UP_PID" 2>/dev/null || true
UP_PID=""
pass "killed ringmaster up (pid) with SIGKILL while job $ID ran"

start_up
rmc ls | grep -q "^$ID " || fail "job $ID is not listed after the restart"
rmc wait "$ID" --timeout 60 || fail "job $ID did not succeed after the restart"
LOGS=$(rmc logs "$ID")
for r in 0 1; do
  for w in before after; do
    [ "$(grep -c "^\[$r\] rank $r $w\$" <<<"$LOGS")" = 1 ] || fail "rank $r '$w' not exactly once in: $LOGS"
  done
done
[ "$(job_field "$ID" restarts)" = 0 ] || fail "the job was restarted instead of re-adopted"
pass "job $ID survived kill -9 of the server and SUCCEEDED with complete logs"
echo "restart_test: all passed"
