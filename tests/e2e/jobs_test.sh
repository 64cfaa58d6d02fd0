#!/usr/bin/env bash
# Jobs through the CLI on `ringmaster up`: a 2-replica job, a failing job,
# cancel, a job too big for the cluster, malformed specs, auth and isolation.
source "$(dirname "$0")/lib.sh"
start_up --cpus 4

# 1. Two replicas that print their rank reach SUCCEEDED; logs show both ranks.
write_spec "$DATA/ranks.yaml" <<'YAML'
name: ranks
kind: distributed
replicas: 2
command: |
  echo "I am rank $RINGMASTER_RANK of $WORLD_SIZE"
  echo "local $LOCAL_RANK of $LOCAL_WORLD_SIZE, task $RINGMASTER_LOCAL_TASK_RANK of $RINGMASTER_LOCAL_TASKS here, master $MASTER_ADDR:$MASTER_PORT"
resources: {cpu: 1, memory: 64Mi}
YAML
ID=$(rmc submit "$DATA/ranks.yaml")
[[ "$ID" =~ ^[0-9]+$ ]] || fail "submit printed '$ID', not a job id"
rmc wait "$ID" --timeout 60 || fail "wait on job $ID exited $?"
[ "$(job_field "$ID" state)" = SUCCEEDED ] || fail "job $ID not SUCCEEDED"
LOGS=$(rmc logs "$ID")
grep -qx '\[0\] I am rank 0 of 2' <<<"$LOGS" || fail "rank 0 line missing: $LOGS"
grep -qx '\[1\] I am rank 1 of 2' <<<"$LOGS" || fail "rank 1 line missing: $LOGS"
FOLLOWED=$(rmc logs -f "$ID" 2>/dev/null)
[ "$(grep -c 'I am rank' <<<"$FOLLOWED")" = 2 ] || fail "logs -f of an ended job: $FOLLOWED"
for r in 0 1; do
  grep -qx "\[$r\] local 0 of 1, task $r of 2 here, master 127.0.0.1:31[0-9][0-9][0-9]" <<<"$LOGS" || fail "rank $r environment: $LOGS"
done
[ "$(grep -o 'master .*' <<<"$LOGS" | sort -u | wc -l)" = 1 ] || fail "ranks disagree on the master: $LOGS"
pass "2-replica job succeeded with both ranks' logs, LOCAL_RANK 0 of 1 and their places on the node, and one MASTER_ADDR:MASTER_PORT from the node's ports"

# 2. A failing command gives FAILED with the exit code in the reason; wait exits 1.
ID=$(echo '{"name": "fails", "command": "echo about to fail; exit 7", "resources": {"cpu": 1}}' | rmc submit -)
set +e; rmc wait "$ID" --timeout 60; RC=$?; set -e
[ "$RC" = 1 ] || fail "wait on a failed job exited $RC, not 1"
[ "$(job_field "$ID" state)" = FAILED ] || fail "job $ID not FAILED"
job_field "$ID" reason | grep -q 'exit code 7' || fail "reason lacks the exit code: $(job_field "$ID" reason)"
rmc logs "$ID" | grep -qx '\[0\] about to fail' || fail "failed job's output missing"
pass "failing job FAILED with 'exit code 7'; wait exited 1"

# 3. cancel of a sleep 600 job: CANCELLED within 10 s and its processes gone.
MARK="600.$$"
ID=$(echo "{\"name\": \"sleeper\", \"command\": [\"sleep\", \"$MARK\"], \"resources\": {\"cpu\": 1}}" | rmc submit -)
wait_state "$ID" RUNNING 30
pgrep -f "sleep $MARK" > /dev/null || fail "the sleep is not running"
rmc cancel "$ID" --no-wait
set +e; rmc wait "$ID" --timeout 10; RC=$?; set -e
[ "$RC" = 1 ] || fail "job $ID did not end within 10 s of cancel (wait exited $RC)"
[ "$(job_field "$ID" state)" = CANCELLED ] || fail "job $ID not CANCELLED"
if pgrep -f "sleep $MARK" > /dev/null; then fail "the cancelled job's sleep is still running"; fi
pass "cancel ended the job as CANCELLED within 10 s; no process left"

# 4. More than any node has: PENDING, with a reason naming the resource.
ID=$(echo '{"name": "huge", "command": "true", "resources": {"cpu": 1, "gpu": 2}}' | rmc submit -)
wait_reason "$ID" 'gpus in total'
[ "$(job_field "$ID" state)" = PENDING ] || fail "job $ID not PENDING"
REASON=$(rmc show "$ID" | grep '^reason:')
grep -q 'pending: needs 1 x {cpu 1, memory 512Mi, gpu 2}' <<<"$REASON" || fail "reason: $REASON"
grep -q 'node .* has 0 gpus in total, needs 2' <<<"$REASON" || fail "reason does not name the gpus: $REASON"
ID2=$(echo '{"name": "big-cpu", "command": "true", "resources": {"cpu": 64}}' | rmc submit -)
wait_reason "$ID2" 'cpus in total'
rmc show "$ID2" | grep -q 'has 4 cpus in total, needs 64' || fail "cpu reason: $(rmc show "$ID2" | grep reason)"
rmc cancel "$ID" > /dev/null 2>&1
rmc cancel "$ID2" > /dev/null 2>&1
pass "oversized jobs stay PENDING with a reason naming the resource"

# 5. Malformed specs: exit != 0, one line naming the problem, and no job.
BEFORE=$(rmc ls --json | jq '.jobs | length')
for spec in 'command: [unclosed' 'command: x
colour: red' 'command: x
resources: {cpu: -1}'; do
  set +e; ERR=$(printf '%s\n' "$spec" | rmc submit - 2>&1 >/dev/null); RC=$?; set -e
  [ "$RC" != 0 ] || fail "malformed spec accepted: $spec"
  [ "$(wc -l <<<"$ERR")" = 1 ] || fail "error is not one line: $ERR"
  echo "   refused: $ERR"
done
AFTER=$(rmc ls --json | jq '.jobs | length')
[ "$BEFORE" = "$AFTER" ] || fail "a malformed spec created a job ($BEFORE -> $AFTER)"
pass "malformed specs refused with one line each; no job created"

# 6. No token: 401. User B cannot read user A's job or logs.
URL=$(jq -r .url "$DATA/server.json")
CODE=$(curl -s -o /dev/null -w '%{http_code}' "$URL/api/v1/jobs")
[ "$CODE" = 401 ] || fail "GET /api/v1/jobs without a token answered $CODE"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/healthz")" = 200 ] || fail "/healthz"
rmc users create alice > /dev/null 2>&1
rmc users create bob > /dev/null 2>&1
ALICE=$(rmc tokens create --user alice)
BOB=$(rmc tokens create --user bob)
ID=$(echo '{"command": "echo alice-private", "resources": {"cpu": 1}}' | RINGMASTER_TOKEN=$ALICE rmc submit -)
RINGMASTER_TOKEN=$ALICE rmc wait "$ID" --timeout 60
RINGMASTER_TOKEN=$ALICE rmc logs "$ID" | grep -q alice-private || fail "alice cannot read her own logs"
set +e
ERR=$(RINGMASTER_TOKEN=$BOB rmc show "$ID" 2>&1); RC1=$?
LOGS=$(RINGMASTER_TOKEN=$BOB rmc logs "$ID" 2>&1); RC2=$?
set -e
[ "$RC1" != 0 ] && grep -q "job $ID not found" <<<"$ERR" || fail "bob read alice's job: $ERR"
[ "$RC2" != 0 ] && ! grep -q alice-private <<<"$LOGS" || fail "bob read alice's logs: $LOGS"
for path in "jobs/$ID" "jobs/$ID/logs"; do
  CODE=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $BOB" "$URL/api/v1/$path")
  [ "$CODE" = 404 ] || fail "bob GET /api/v1/$path answered $CODE"
done
RINGMASTER_TOKEN=$BOB rmc ls | grep -q alice-private && fail "bob's ls shows alice's job"
pass "401 without a token; bob gets 404 for alice's job and logs"
echo "jobs_test: all passed"
