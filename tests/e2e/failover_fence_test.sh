#!/usr/bin/env bash
# An old leader that wakes cannot write: leader a is stopped (SIGSTOP) for
# longer than its 10 s lease while a submit to it is in flight; standby b
# takes over; a is continued (SIGCONT):
#  - the in-flight submit is not acknowledged and its job never appears;
#  - what a is asked to write after waking is not acknowledged by a either;
#  - a steps down: its /healthz says standby (it re-executed) and names b;
#  - b, the leader, keeps serving.
HERE=$(cd "$(dirname "$0")" && pwd)  # lib.sh changes directory
source "$HERE/lib.sh"
source "$HERE/failover_lib.sh"
trap 'rc=$?; set +e; [ $rc -ne 0 ] && dump_servers; stop_servers; (exit $rc); cleanup' EXIT

start_pair
A=$(srv_url a)
B=$(srv_url b)
submit_to() {  # submit_to URL NAME: the HTTP status of a submit sent to that server alone
  curl -s -m 60 -o "$DATA/$2.body" -w '%{http_code}' -X POST -H "Authorization: Bearer $RINGMASTER_TOKEN" \
    -H "Content-Type: application/yaml" -H "Idempotency-Key: $2" \
    --data-binary "name: $2"$'\ncommand: ["true"]\nresources: {cpu: 64}\n' "$1/api/v1/jobs" || true
}
[ "$(submit_to "$A" fence-before)" = 201 ] || fail "leader a refused a submit: $(cat "$DATA/fence-before.body")"

submit_to "$A" fence-inflight > "$DATA/inflight.code" &
INFLIGHT=$!
kill -STOP "${SRV_PID[a]}"
STOPPED=$(date +%s)
pass "leader a stopped with a submit in flight"
await_role b leader 25
pass "standby b leads after $(( $(date +%s) - STOPPED )) s"
sleep 2
kill -CONT "${SRV_PID[a]}"
pass "a continued"
LATE=$(submit_to "$A" fence-after)
wait "$INFLIGHT" || true
INFLIGHT_CODE=$(cat "$DATA/inflight.code")
case "$LATE" in 2*) fail "the old leader acknowledged a submit after waking ($LATE)";; esac
await_role a standby 30
[ "$(curl -s "$A/healthz" | jq -r .leader)" = "$B" ] || fail "a does not name b as the leader: $(curl -s "$A/healthz")"
pass "a stepped down: standby, leader $B (the late submit: $LATE)"

visible() {
  curl -s -m 10 -H "Authorization: Bearer $RINGMASTER_TOKEN" "$B/api/v1/jobs?all=1&name=$1&limit=1" | jq .total
}
[ "$(visible fence-before)" = 1 ] || fail "the job acknowledged before the pause is gone"
[ "$(visible fence-after)" = 0 ] || fail "the old leader's late write is visible"
case "$INFLIGHT_CODE" in
  2*) [ "$(visible fence-inflight)" = 1 ] || fail "an acknowledged submit is missing" ;;  # answered before the stop
  *) [ "$(visible fence-inflight)" = 0 ] || fail "the submit in flight at SIGSTOP became visible ($INFLIGHT_CODE)" ;;
esac
pass "nothing the old leader tried after the takeover is visible (in flight: $INFLIGHT_CODE)"
[ "$(submit_to "$B" fence-new)" = 201 ] || fail "the new leader refused a submit: $(cat "$DATA/fence-new.body")"
echo "failover_fence_test: all passed"
