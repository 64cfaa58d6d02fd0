#!/usr/bin/env bash
# Chaos: kill -9 of the server during 1,000 submits from 16 concurrent
# clients, then a restart on the same data dir. Every acknowledged submit
# (the CLI printed the id of a 201) is a job that exists exactly once with
# the name its client gave it; no job is half stored (every job has all its
# task rows and an event); no id is reused after the restart. Submits that
# were in flight when the server died may or may not exist: nobody was told.
source "$(dirname "$0")/lib.sh"
CLIENTS=16 TOTAL=1000 KILL_AFTER=300

start() {
  "$RM" server --data "$DATA" --port 0 --max-pending-jobs 0 >> "$DATA/server.log" 2>&1 &
  UP_PID=$!
  for _ in $(seq 1 100); do
    [ -f "$DATA/server.json" ] && curl -sf "$(jq -r .url "$DATA/server.json")/healthz" > /dev/null && return 0
    sleep 0.1
  done
  fail "the server did not start"
}
rm -f "$DATA/server.json"
start
SPEC='{"name": "NAME", "kind": "distributed", "replicas": 2, "command": ["true"], "resources": {"cpu": 0.1, "memory": "16Mi"}}'

# client C: submits jobs c<C>-<n> until $DATA/stop exists or its share is done;
# writes "id name" for each acknowledged one. A failure (the server is away)
# is retried with the next name after a short pause.
client() {
  local c=$1 n=0 id
  while [ ! -f "$DATA/stop" ] && [ "$n" -lt $((TOTAL / CLIENTS + 1)) ]; do
    n=$((n + 1))
    if id=$(rmc submit - <<<"${SPEC/NAME/c$c-$n}" 2>/dev/null); then
      echo "$id c$c-$n" >> "$DATA/acked.$c"
    else
      echo "c$c-$n" >> "$DATA/failed.$c"
      sleep 0.2
    fi
  done
}
PIDS=()
for c in $(seq 1 $CLIENTS); do client "$c" & PIDS+=($!); done

# kill -9 once KILL_AFTER submits are acknowledged
for _ in $(seq 1 600); do
  [ "$(cat "$DATA"/acked.* 2>/dev/null | wc -l)" -ge "$KILL_AFTER" ] && break
  sleep 0.05
done
kill -KILL "$UP_PID"
wait "$UP_PID" 2>/dev/null || true
AT_KILL=$(cat "$DATA"/acked.* | wc -l)
pass "kill -9 of the server after $AT_KILL acknowledged submits, $CLIENTS clients still submitting"
sleep 1
rm -f "$DATA/server.json"
start
for p in "${PIDS[@]}"; do wait "$p"; done
ACKED=$(cat "$DATA"/acked.* | wc -l)
FAILED=$(cat "$DATA"/failed.* 2>/dev/null | wc -l)
[ "$ACKED" -gt "$AT_KILL" ] || fail "no submit was acknowledged after the restart"
pass "restarted; $ACKED submits acknowledged in all, $FAILED refused or cut while the server was away"

# ---- every acknowledged job exactly once, with its name
LIST=$(curl -sf -H "Authorization: Bearer $(cat "$DATA/admin.token")" "$(jq -r .url "$DATA/server.json")/api/v1/jobs?all=1&limit=10000")
jq -r '.jobs[] | "\(.id) \(.name)"' <<<"$LIST" | sort > "$DATA/stored"
DUP=$(awk '{print $1}' "$DATA/stored" | uniq -d)
[ -z "$DUP" ] || fail "job ids listed twice: $DUP"
DUPN=$(awk '{print $2}' "$DATA/stored" | sort | uniq -d)
[ -z "$DUPN" ] || fail "a submit stored twice: $(head -3 <<<"$DUPN")"
MISSING=$(sort "$DATA"/acked.* | comm -23 - "$DATA/stored")
[ -z "$MISSING" ] || fail "acknowledged but not stored (id name): $(head -5 <<<"$MISSING")"
pass "all $ACKED acknowledged jobs are stored, each once, under its id and name ($(wc -l < "$DATA/stored") jobs in all)"

# ---- nothing half stored, no id reused
kill -TERM "$UP_PID"; wait "$UP_PID" 2>/dev/null || true; UP_PID=""
HALF=$(sqlite3 "$DATA/meta.db" "SELECT j.id FROM jobs j WHERE j.replicas != (SELECT count(*) FROM tasks t WHERE t.job_id = j.id)
  OR NOT EXISTS (SELECT 1 FROM events e WHERE e.job_id = j.id)")
[ -z "$HALF" ] || fail "jobs without all their tasks or events: $HALF"
[ "$(sqlite3 "$DATA/meta.db" 'PRAGMA integrity_check')" = ok ] || fail "the database is damaged"
MAX=$(awk '{print $1}' "$DATA/stored" | sort -n | tail -n 1)
start
NEW=$(rmc submit - <<<"${SPEC/NAME/after}")
[ "$NEW" -gt "$MAX" ] || fail "id $NEW given after the restart is not above every earlier id ($MAX)"
pass "no job half stored (tasks and events of each), integrity_check ok, the next id $NEW > $MAX"
