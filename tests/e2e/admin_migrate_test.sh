#!/usr/bin/env bash
# Moving a site's metadata to another store (`ringmaster admin migrate`): a
# site on SQLite (`ringmaster up`: a server and its agent) with users, tokens,
# jobs (one run to completion, one deleted: the highest id) and files; the migration refused
# while its server runs; the server stopped, its data migrated, the server
# started on the new store with the same data dir (files and logs stay
# there): the same CLI commands show the same data, the old tokens still
# work, and a deleted job's id does not come back.
#   admin_migrate_test.sh postgres   into a PostgreSQL of the test's own
#                                    (tests/fixtures/postgres.sh)
#   admin_migrate_test.sh sqlite     into another SQLite file
source "$(dirname "$0")/lib.sh"
TARGET=${1:?usage: admin_migrate_test.sh postgres|sqlite}
PG_DIR=$DATA/pg
trap 'rc=$?; set +e; [ -d "$PG_DIR" ] && bash "$REPO/tests/fixtures/postgres.sh" down "$PG_DIR"; (exit $rc); cleanup' EXIT
# The fixture's PostgreSQL runs as the user postgres, which must reach $PG_DIR.
chmod 0711 "$DATA"

start_up --cpus 2
alice_and_bob
ADMIN=$(cat "$DATA/admin.token")
RUN=$(echo '{"name": "ran", "kind": "distributed", "replicas": 2,
  "command": "echo hello from $RINGMASTER_RANK", "resources": {"cpu": 0.5, "memory": "64Mi"}}' | as_alice submit --no-workdir -)
as_alice wait "$RUN" --timeout 60 > /dev/null || fail "job $RUN did not succeed: $(as_alice show "$RUN")"
KEPT=$(echo '{"name": "kept", "command": "sleep 600", "resources": {"cpu": 64}}' | as_bob submit --no-workdir -)
GONE=$(echo '{"name": "gone", "command": "true", "resources": {"cpu": 0.5}}' | as_bob submit --no-workdir -)
as_bob wait "$GONE" --timeout 60 > /dev/null || fail "job $GONE did not succeed"
as_bob delete "$GONE" > /dev/null
echo "a file of alice's" > "$DATA/notes.txt"
as_alice files put "$DATA/notes.txt" > /dev/null
rmc files put "$DATA/notes.txt" datasets/shared/notes.txt > /dev/null
rmc users quota alice 1Gi > /dev/null
rmc users disable bob > /dev/null
rmc users enable bob > /dev/null
pass "a site on SQLite: users alice and bob, job $RUN succeeded, $GONE deleted, $KEPT pending, files uploaded"

# What the CLI shows of it. A restarted server's agent registers again (an
# audit entry), and the scheduler touches its pending job (updated_ms) and
# places it in its queue (queue_position: live, from its latest pass).
state() {
  rmc ls -a --json | jq -S '.jobs[] |= del(.updated_ms, .queue_position)'
  for id in "$RUN" "$KEPT"; do rmc show "$id" --json | jq -S 'del(.updated_ms, .queue_position)'; done
  rmc logs "$RUN" | sort
  as_alice files ls --json | jq -S .
  rmc files ls datasets/ --json | jq -S .
  rmc files du users/alice/
  rmc users ls
  rmc tokens ls -a
  rmc audit -n 1000 --json | jq -S '[.entries[] | select(.action != "agent.register")]'
}
BEFORE=$(state)
grep -q "hello from 1" <<<"$BEFORE" || fail "no logs of job $RUN: $BEFORE"

if [ "$TARGET" = postgres ]; then
  bash "$REPO/tests/fixtures/postgres.sh" up "$PG_DIR" > /dev/null
  TO=$(cat "$PG_DIR/url")
else
  TO=sqlite:$DATA/moved.db
fi
set +e
OUT=$(rmc admin migrate --from "sqlite:$DATA/meta.db" --to "$TO" 2>&1)
RC=$?
set -e
[ "$RC" = 2 ] || fail "migrating a running server's database exited $RC: $OUT"
grep -q "is open in process $UP_PID.*stop the server first" <<<"$OUT" || fail "the refusal does not name the server: $OUT"
pass "refused while the server runs: $OUT"

stop_up
OUT=$(rmc admin migrate --from "sqlite:$DATA/meta.db" --to "$TO" 2>&1) || fail "migrate failed: $OUT"
for t in users tokens nodes jobs tasks events audit registry_credentials; do
  grep -q "$t: [0-9]* rows.*counts match" <<<"$OUT" || fail "no line for table $t: $OUT"
done
grep -q "jobs: [0-9]* rows, ids up to $GONE," <<<"$OUT" || fail "the jobs' ids: $OUT"
pass "migrated: $(tail -1 <<<"$OUT")"
set +e
AGAIN=$(rmc admin migrate --from "sqlite:$DATA/meta.db" --to "$TO" 2>&1)
RC=$?
set -e
[ "$RC" = 2 ] && grep -q "already holds data" <<<"$AGAIN" || fail "a second migration into the full store: exit $RC: $AGAIN"
pass "a second migration into it is refused: $AGAIN"

mv "$DATA/meta.db" "$DATA/meta.db.old"
start_up --cpus 2 --meta "$TO"
AFTER=$(state)
[ "$AFTER" = "$BEFORE" ] || fail "the CLI shows other data after the migration: $(diff <(echo "$BEFORE") <(echo "$AFTER") | head -20)"
pass "ls, show, logs, files ls/du, users ls, tokens ls and audit show the same on $TARGET"

[ "$(as_alice whoami | grep -c alice)" -ge 1 ] || fail "alice's old token: $(as_alice whoami)"
RINGMASTER_TOKEN=$ADMIN rmc users ls > /dev/null || fail "the admin's old token is refused"
[ "$(as_alice files cat users/alice/notes.txt)" = "a file of alice's" ] || fail "alice's file"
NEW=$(echo '{"name": "after", "command": "echo after", "resources": {"cpu": 0.5}}' | as_bob submit --no-workdir -)
[ "$NEW" -gt "$GONE" ] || fail "a new job got id $NEW, not above deleted job $GONE (ids are never reused)"
as_bob wait "$NEW" --timeout 60 > /dev/null || fail "job $NEW on the migrated site did not succeed: $(as_bob show "$NEW")"
if as_bob show "$GONE" > /dev/null 2>&1; then fail "deleted job $GONE came back"; fi
pass "old tokens work; a new job $NEW (> $GONE) runs on the migrated site; deleted job $GONE stays gone"
echo "admin_migrate_test: all passed"
