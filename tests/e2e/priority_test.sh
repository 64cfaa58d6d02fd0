#!/usr/bin/env bash
# Priority is a privilege: bob's priority above his maximum (0 by default) is
# refused with the field named, and so is network: host. An admin grants him
# 1000 (`users set`); his priority-1000 job then preempts his own running job,
# never alice's, who holds no more than her half of the 2-cpu node.
source "$(dirname "$0")/lib.sh"
start_up --cpus 2 --memory 2Gi --ports 32700-32749
alice_and_bob
job() { jq -nc --arg name "$1" --argjson p "$2" --argjson cpu "$3" --arg cmd "$4" \
  '{name: $name, priority: $p, command: $cmd, resources: {cpu: $cpu, memory: "64Mi"}}'; }

if OUT=$(job vip 1000 1 true | as_bob submit - 2>&1); then fail "bob's priority 1000 was accepted: $OUT"; fi
grep -q "priority: 1000 is above the maximum of user bob, 0" <<<"$OUT" || fail "unclear refusal: $OUT"
pass "priority above bob's maximum is refused: $OUT"
if OUT=$(echo '{"name": "h", "network": "host", "command": "true"}' | as_bob submit - 2>&1); then
  fail "bob's network: host was accepted: $OUT"
fi
grep -q "network: host .* may not use it" <<<"$OUT" || fail "unclear refusal: $OUT"
pass "network: host without the grant is refused: $OUT"

if as_bob users set bob --max-priority 1000 2> /dev/null; then fail "bob granted himself a priority"; fi
rmc users set bob --max-priority 1000
rmc users ls | grep -qP '^bob\tuser\tmax-priority 1000\thost-network no' || fail "users ls: $(rmc users ls)"
rmc users ls | grep -qP '^admin\tadmin\tmax-priority 1000\thost-network yes' || fail "users ls: $(rmc users ls)"
pass "an admin granted bob priority 1000: $(rmc users ls | grep -P '^bob\t')"

ALICE_JOB=$(job alice 0 1 "sleep 600" | as_alice submit -)
wait_state "$ALICE_JOB" RUNNING 30
BOB_LOW=$(job bob-low 0 1 "sleep 600" | as_bob submit -)
wait_state "$BOB_LOW" RUNNING 30
VIP=$(job vip 1000 1 "echo vip" | as_bob submit -)
rmc wait "$VIP" --timeout 60 > /dev/null || { rmc show "$VIP"; fail "bob's priority-1000 job did not run"; }
rmc show "$BOB_LOW" | grep -q "preempted for job $VIP (priority 1000 > 0)" ||
  { rmc show "$BOB_LOW"; fail "bob's own lower-priority job $BOB_LOW was not the one preempted"; }
[ "$(job_field "$ALICE_JOB" state)" = RUNNING ] || fail "alice's job is $(job_field "$ALICE_JOB" state)"
if rmc show "$ALICE_JOB" | grep -q preempted; then rmc show "$ALICE_JOB"; fail "alice's job was preempted"; fi
pass "bob's priority-1000 job $VIP preempted his own job $BOB_LOW, not alice's $ALICE_JOB"

# Needing both cpus, it has no job of his own that makes room: alice's stays.
wait_state "$BOB_LOW" RUNNING 60
BIG=$(job big 1000 2 true | as_bob submit -)
sleep 2  # scheduler passes
[ "$(job_field "$BIG" state)" = PENDING ] || fail "job $BIG is $(job_field "$BIG" state)"
[ "$(job_field "$ALICE_JOB" state)" = RUNNING ] || fail "alice's job is $(job_field "$ALICE_JOB" state)"
if rmc show "$ALICE_JOB" | grep -q preempted; then rmc show "$ALICE_JOB"; fail "alice's job was preempted for $BIG"; fi
pass "bob's 2-cpu priority-1000 job waits; alice's job runs on: $(job_field "$BIG" reason)"
for id in "$BIG" "$BOB_LOW" "$ALICE_JOB"; do rmc cancel "$id" > /dev/null; done
echo "priority_test: all passed"
