#!/usr/bin/env bash
# Quotas through the real flags: `ringmaster up --quota admin:cpus=1,borrow=no`
# on a 2-cpu node. The first 1-cpu job runs; the second waits with a reason
# naming the quota (it may not borrow the idle cpu), and runs once the first
# ends. A bad --quota stops startup with one line naming the flag.
source "$(dirname "$0")/lib.sh"
if "$RM" up --data "$DATA/bad" --port 0 --quota admin:gpus=lots 2> "$DATA/bad.err"; then fail "a bad --quota was accepted"; fi
grep -qx 'ringmaster: --quota: gpus="lots" is not a GPU count' "$DATA/bad.err" || fail "unclear error: $(cat "$DATA/bad.err")"
pass "a bad --quota is refused: $(cat "$DATA/bad.err")"

start_up --cpus 2 --memory 2Gi --ports 32400-32449 --quota admin:cpus=1,borrow=no
FIRST=$(echo '{"name": "first", "command": "sleep 4", "resources": {"cpu": 1, "memory": "64Mi"}}' | rmc submit -)
SECOND=$(echo '{"name": "second", "command": "true", "resources": {"cpu": 1, "memory": "64Mi"}}' | rmc submit -)
wait_state "$FIRST" RUNNING 30
sleep 1.5  # a scheduler pass or two
[ "$(job_field "$SECOND" state)" = PENDING ] || fail "job $SECOND ran beyond the quota: $(job_field "$SECOND" state)"
REASON=$(job_field "$SECOND" reason)
grep -q "over quota: user admin holds 1 of 1 cpus, and its quota may not borrow" <<<"$REASON" || fail "reason: $REASON"
pass "job $SECOND waits on an idle cpu: $REASON"
rmc wait "$SECOND" --timeout 30 > /dev/null || { rmc show "$SECOND"; fail "job $SECOND did not run after job $FIRST"; }
pass "it ran once job $FIRST ended and gave the quota back"
echo "quota_test: all passed"
