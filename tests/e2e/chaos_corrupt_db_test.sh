#!/usr/bin/env bash
# Chaos: a damaged database. With the server stopped, one job's row gets a
# state that is no state (a damaged row) and the audit table's root page is
# overwritten with garbage (a damaged page). The server must still start,
# name both in its log and in /healthz (503 "damaged"), serve the sound jobs
# as before, answer for the damaged job with an error naming the damage (never
# a made-up state), leave it out of lists, and keep taking new work.
source "$(dirname "$0")/lib.sh"
command -v sqlite3 > /dev/null || fail "sqlite3 is missing: run scripts/install-deps.sh"

start() {
  "$RM" server --data "$DATA" --port 0 >> "$DATA/server.log" 2>&1 &
  UP_PID=$!
  for _ in $(seq 1 100); do
    [ -f "$DATA/server.json" ] && curl -s -o /dev/null "$(jq -r .url "$DATA/server.json")/healthz" && break
    kill -0 "$UP_PID" 2> /dev/null || { cat "$DATA/server.log"; fail "the server exited"; }
    sleep 0.1
  done
  URL=$(jq -r .url "$DATA/server.json")
}
start
SPEC='{"name": "NAME", "command": ["true"], "resources": {"cpu": 64, "memory": "16Mi"}}'  # no node: they stay PENDING
for n in one two three; do rmc submit --no-workdir - <<< "${SPEC/NAME/$n}" > /dev/null; done
rmc users create mallory > /dev/null  # an audited admin action: the audit table has a row
rmc users create eve > /dev/null
EVE=$(rmc tokens create --user eve)  # a user's token, for the admins-only damage list
BEFORE1=$(rmc show 1 --json | jq -c '{name, state, reason, spec}')
stop_up
rm -f "$DATA/server.json"

DB=$DATA/meta.db
[ ! -s "$DB-wal" ] || fail "the server left an unmerged log ($DB-wal); the test damages the database file itself"
sqlite3 "$DB" "UPDATE jobs SET state='BOGUS' WHERE id=2"
ROOT=$(sqlite3 "$DB" "SELECT rootpage FROM sqlite_schema WHERE name='audit'")
PAGE=$(sqlite3 "$DB" "PRAGMA page_size")
[ "$ROOT" -gt 1 ] || fail "audit's root page: \"$ROOT\""
head -c 512 /dev/urandom | dd of="$DB" bs=1 seek=$(((ROOT - 1) * PAGE)) conv=notrunc status=none
pass "damaged: job 2's row (state BOGUS) and page $ROOT (the audit table's root)"

start
HEALTH=$(curl -s -w '\n%{http_code}' "$URL/healthz")
[ "$(tail -1 <<< "$HEALTH")" = 503 ] || fail "/healthz of a damaged database: $HEALTH"
HEALTH=$(head -1 <<< "$HEALTH")
[ "$(jq -r .status <<< "$HEALTH")" = damaged ] && [ "$(jq -r .damaged <<< "$HEALTH")" -ge 2 ] || fail "/healthz: $HEALTH"
! grep -q BOGUS <<< "$HEALTH" || fail "/healthz (no token) quotes stored data: $HEALTH"
BODY=$(curl -s -H "Authorization: Bearer $(cat "$DATA/admin.token")" "$URL/api/v1/damage")
jq -r '.damage[]' <<< "$BODY" | grep -q 'job 2: stored state "BOGUS"' || fail "/api/v1/damage does not name job 2: $BODY"
jq -r '.damage[]' <<< "$BODY" | grep -q 'audit' || fail "/api/v1/damage does not name the audit table: $BODY"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $EVE" "$URL/api/v1/damage")" = 403 ] ||
  fail "a user's token read the damage list"
grep -q 'database damaged: job 2' "$DATA/server.log" || fail "the server's log does not name job 2"
pass "the server started: /healthz says damaged ($(jq -r .damaged <<< "$HEALTH")), and the admins' list and the log name it: $(jq -c .damage <<< "$BODY" | cut -c1-160)"

[ "$(rmc show 1 --json | jq -c '{name, state, reason, spec}')" = "$BEFORE1" ] || fail "job 1 changed: $(rmc show 1 --json)"
OUT=$(rmc show 2 2>&1) && fail "job 2 was shown: $OUT"
grep -q 'damaged' <<< "$OUT" && grep -q 'job 2' <<< "$OUT" || fail "job 2's error does not name the damage: $OUT"
CODE=$(curl -s -o "$DATA/job2.json" -w '%{http_code}' -H "Authorization: Bearer $(cat "$DATA/admin.token")" "$URL/api/v1/jobs/2")
[ "$CODE" = 500 ] && [ "$(jq -r .error.code "$DATA/job2.json")" = DataLoss ] || fail "GET job 2: $CODE $(cat "$DATA/job2.json")"
IDS=$(rmc ls --json | jq -r '[.jobs[].id] | sort | join(",")')
[ "$IDS" = "1,3" ] || fail "the list shows jobs $IDS, not 1 and 3 (2 is damaged)"
OUT=$(rmc audit 2>&1) && fail "the damaged audit table was listed: $OUT"
grep -q 'damaged' <<< "$OUT" || fail "the audit list's error does not name the damage: $OUT"
pass "sound jobs served as before; job 2 and the audit log answer DataLoss naming the damage; lists leave job 2 out"

ID=$(rmc submit --no-workdir - <<< "${SPEC/NAME/four}") || fail "a submit after the damage failed"
[ "$ID" = 4 ] || fail "the new job got id $ID, not 4"
kill -0 "$UP_PID" || fail "the server died"
pass "new work is still taken (job $ID) and the server stays up"
echo "chaos_corrupt_db_test: all passed"
