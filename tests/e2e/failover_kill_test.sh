#!/usr/bin/env bash
# A leader killed with SIGKILL under load: two servers on one PostgreSQL (the
# files on a Ceph RGW), agents and clients given both URLs.
#  - 500 submits from 8 clients, each with its own Idempotency-Key, retried
#    across both servers; the leader is killed part way through;
#  - the standby takes over within 15 s (printed: kill -9 to leader, and to
#    the first acknowledged submit);
#  - every acknowledged submit is one job: its key answers the same id again
#    (200), ids are never shared, and the store holds no job beyond them;
#  - a 2-worker training job running across the failover succeeds, on its
#    first attempt (the agents kept their tasks through the switch).
HERE=$(cd "$(dirname "$0")" && pwd)  # lib.sh changes directory
source "$HERE/lib.sh"
source "$HERE/failover_lib.sh"
: "${RINGMASTER_TRAIN:?set RINGMASTER_TRAIN}"
trap 'rc=$?; set +e; [ $rc -ne 0 ] && dump_servers; stop_agents; stop_servers; (exit $rc); cleanup' EXIT

start_pair
pass "leader a and standby b on $STORE"
start_agent node-a 32500-32549 "$SANDBOXES"
start_agent node-b 32550-32599 "$SANDBOXES"
await_nodes 2

ID=$(submit_train2 across-failover 8)
wait_state "$ID" RUNNING 60
pass "job $ID trains on two agents"

export STOP_FILE=$DATA/killed
PYTHONPATH=$REPO/python /usr/bin/python3 "$HERE/failover_submits.py" "$SERVERS" "$RINGMASTER_TOKEN" 8 63 \
  > "$DATA/acks" 2> "$DATA/submits.err" &
LOAD=$!
for _ in $(seq 1 300); do [ "$(grep -c '^c' "$DATA/acks" || true)" -ge 150 ] && break; sleep 0.1; done
date +%s.%N > "$STOP_FILE"
kill -KILL "${SRV_PID[a]}"
KILLED=$(cat "$STOP_FILE")
pass "leader a killed after $(grep -c '^c' "$DATA/acks") acknowledged submits"
await_role b leader 15
LEADING=$(date +%s.%N)
wait "$LOAD" || fail "the clients failed: $(tail -5 "$DATA/submits.err")"
FIRST=$(awk '$1 == "first-after" {print $2}' "$DATA/acks" | sort -n | head -1)
[ -n "$FIRST" ] || fail "no submit was acknowledged after the kill"
TAKEOVER=$(echo "$LEADING - $KILLED" | bc)
FIRST_ACK=$(echo "$FIRST - $KILLED" | bc)
echo "failover: standby leading ${TAKEOVER}s after kill -9, first accepted submit after ${FIRST_ACK}s"
(( $(echo "$FIRST_ACK <= 15" | bc) )) || fail "the first submit after the kill took ${FIRST_ACK}s (> 15 s)"

ACKS=$(grep -c '^c' "$DATA/acks")
UNACKED=$(grep -c '^unacknowledged' "$DATA/submits.err" || true)
[ "$ACKS" -ge 480 ] || fail "only $ACKS of 504 submits acknowledged: $(head -3 "$DATA/submits.err")"
DUP_IDS=$(grep '^c' "$DATA/acks" | awk '{print $2}' | sort | uniq -d)
[ -z "$DUP_IDS" ] || fail "ids given to two keys: $DUP_IDS"
DUP_KEYS=$(grep '^c' "$DATA/acks" | awk '{print $1}' | sort | uniq -d)
[ -z "$DUP_KEYS" ] || fail "a key acknowledged twice: $DUP_KEYS"
# Each acknowledged key is exactly its job: the same key again answers it (200).
BAD=$(grep '^c' "$DATA/acks" | shuf -n 100 | while read -r key id; do
  got=$(curl -s -m 10 -L -X POST -H "Authorization: Bearer $RINGMASTER_TOKEN" -H "Idempotency-Key: $key" \
        -H "Content-Type: application/yaml" --data-binary $'name: load\ncommand: ["true"]\nresources: {cpu: 64}\n' \
        -w ' %{http_code}' "$(srv_url b)/api/v1/jobs")
  [ "$(jq -r .id <<<"${got% *}") ${got##* }" = "$id 200" ] || echo "$key: $id, again: $got"
done)
[ -z "$BAD" ] || fail "acknowledged keys that are not their job: $(head -3 <<<"$BAD")"
TOTAL=$(curl -s -m 10 -H "Authorization: Bearer $RINGMASTER_TOKEN" "$(srv_url b)/api/v1/jobs?all=1&name=load&limit=1" | jq .total)
[ "$TOTAL" -ge "$ACKS" ] && [ "$TOTAL" -le $((ACKS + UNACKED)) ] || fail "$TOTAL load jobs for $ACKS acknowledged and $UNACKED unacknowledged submits"
pass "$ACKS submits acknowledged, each one job under its key ($TOTAL load jobs), no id reused"

rmc wait "$ID" --timeout 600 > /dev/null || { rmc show "$ID"; rmc logs "$ID" | tail -20; fail "job $ID did not succeed"; }
SHOW=$(rmc show "$ID" --json)
[ "$(jq -r .restarts <<<"$SHOW")" = 0 ] || fail "job $ID was restarted across the failover: $(rmc show "$ID")"
pass "job $ID succeeded across the failover, first attempt"
echo "failover_kill_test: all passed"
