#!/usr/bin/env bash
# An elastic training job (replicas {min: 2, max: 3}) on a 3-cpu cluster:
# it starts with 2 workers next to a 1-cpu job; when that job ends it grows to
# 3 workers; when a higher-priority job arrives it shrinks back to 2 to make
# room. Each resize restarts the gang from its latest checkpoint at the new
# size (no resubmission), and the job still succeeds.
source "$(dirname "$0")/lib.sh"
: "${RINGMASTER_TRAIN:?set RINGMASTER_TRAIN}"  # built; the agent stages it for tasks
# Its own port range: other e2e tests run clusters on this host at the same time.
start_up --cpus 3 --memory 6Gi --ports 32300-32349

BLOCKER=$(echo '{"name": "blocker", "command": "sleep 8", "resources": {"cpu": 1, "memory": "64Mi"}}' | rmc submit -)
ID=$(jq -n '{name: "elastic", kind: "distributed", replicas: {min: 2, max: 3}, resources: {cpu: 1, memory: "1Gi"},
  command: ["ringmaster-train", "--model", "lenet5", "--epochs", "4", "--checkpoint-every", "50", "--threads", "1",
            "--progress", "none"]}' | rmc submit -)
wait_state "$ID" RUNNING 30
[ "$(job_field "$ID" replicas)" = 2 ] || fail "elastic job started with $(job_field "$ID" replicas) workers, not 2"
pass "elastic job $ID runs with 2 workers next to job $BLOCKER"

rmc wait "$BLOCKER" --timeout 30 > /dev/null
for _ in $(seq 1 300); do
  [ "$(job_field "$ID" replicas)" = 3 ] && [ "$(job_field "$ID" state)" = RUNNING ] && break
  sleep 0.1
done
[ "$(job_field "$ID" replicas)" = 3 ] || { rmc show "$ID"; fail "elastic job did not grow to 3 workers"; }
wait_state "$ID" RUNNING 30
# Let the 3-worker gang train: wait (a hang guard) for its first checkpoint.
for _ in $(seq 1 600); do rmc logs "$ID" | grep -q "^\[0\] training lenet5 on fashion-mnist: 3 workers" && break; sleep 0.1; done
AT=$(latest_checkpoint "$ID")
for _ in $(seq 1 600); do [ "$(latest_checkpoint "$ID")" != "$AT" ] && break; sleep 0.1; done
[ "$(latest_checkpoint "$ID")" != "$AT" ] || { rmc logs "$ID" | tail; fail "the 3-worker gang uploaded no checkpoint"; }
pass "it grew to 3 workers when the other job freed a cpu, and checkpointed at that size"

URGENT=$(echo '{"name": "urgent", "priority": 10, "command": "echo urgent", "resources": {"cpu": 1, "memory": "64Mi"}}' | rmc submit -)
rmc wait "$URGENT" --timeout 60 > /dev/null || { rmc show "$URGENT"; rmc show "$ID"; fail "the urgent job did not run"; }
# The urgent job may start on the first cpu a stopping worker frees and end
# before the whole gang has settled at its new size: wait for that (a hang guard).
for _ in $(seq 1 100); do [ "$(job_field "$ID" replicas)" = 2 ] && break; sleep 0.1; done
[ "$(job_field "$ID" replicas)" = 2 ] || { rmc show "$ID"; fail "elastic job did not shrink to 2 workers"; }
pass "it shrank to 2 workers for the higher-priority job $URGENT"

rmc wait "$ID" --timeout 240 || { rmc show "$ID"; rmc logs "$ID" | tail -30; fail "elastic job $ID did not succeed"; }
LOGS=$(rmc logs "$ID")
grep -q "^\[0\] the job now has 3 workers (the checkpoint had 2)" <<<"$LOGS" || fail "no resume at 3 workers: $LOGS"
grep -q "^\[0\] the job now has 2 workers (the checkpoint had 3)" <<<"$LOGS" || fail "no resume at 2 workers: $LOGS"
grep -q "^\[0\] final test accuracy" <<<"$LOGS" || fail "no final accuracy: $LOGS"
SHOW=$(rmc show "$ID")
grep -q "scale up from 2 to 3 workers" <<<"$SHOW" || fail "no scale-up event: $SHOW"
grep -q "scale down from 3 to 2 workers for job $URGENT (priority 10)" <<<"$SHOW" || fail "no scale-down event: $SHOW"
[ "$(job_field "$ID" restarts)" = 0 ] || fail "resizes counted as restarts"
pass "it resumed from its checkpoint at each size and succeeded: $(grep -o 'final test accuracy [0-9.]*' <<<"$LOGS")"
echo "elastic_test: all passed"
