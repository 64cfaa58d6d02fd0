#!/usr/bin/env bash
# The online backup of the metadata (`ringmaster admin backup`): taken while
# a client keeps submitting jobs to the running server, private (0600), and
# restored: a server started on a fresh data dir with the backup as its
# meta.db shows the same users, tokens and jobs through the CLI, and the old
# tokens work there. With a PostgreSQL store the command names the pg_dump
# to run instead (and never prints the password).
source "$(dirname "$0")/lib.sh"
RESTORED=$(mktemp -d /tmp/rm-e2e-restored.XXXXXX)
RESTORED_PID=""
WRITER_PID=""
trap 'rc=$?; set +e
  [ -n "$WRITER_PID" ] && kill "$WRITER_PID" 2>/dev/null
  [ -n "$RESTORED_PID" ] && kill -TERM "$RESTORED_PID" 2>/dev/null && wait "$RESTORED_PID" 2>/dev/null
  [ $rc -ne 0 ] && [ -f "$RESTORED/server.log" ] && tail -20 "$RESTORED/server.log" >&2
  rm -rf "$RESTORED"; (exit $rc); cleanup' EXIT

start_up --cpus 2
alice_and_bob
RUN=$(echo '{"name": "ran", "command": "echo hello", "resources": {"cpu": 0.5, "memory": "64Mi"}}' | as_alice submit --no-workdir -)
as_alice wait "$RUN" --timeout 60 > /dev/null || fail "job $RUN did not succeed"
# Jobs too big for the node stay pending: the writer only adds rows.
writer() {
  while true; do echo '{"name": "busy", "command": "true", "resources": {"cpu": 64}}' | as_bob submit --no-workdir - > /dev/null; done
}
writer &
WRITER_PID=$!
for _ in $(seq 1 100); do [ "$(rmc ls -a --json | jq .total)" -ge 10 ] && break; sleep 0.1; done
BEFORE=$(rmc ls -a --json | jq .total)
[ "$BEFORE" -ge 10 ] || fail "the writer submitted only $BEFORE jobs"

OUT=$(rmc admin backup --to "$DATA/backup.db" 2>&1) || fail "backup failed: $OUT"
AFTER=$(rmc ls -a --json | jq .total)
kill "$WRITER_PID"
wait "$WRITER_PID" 2>/dev/null || true
WRITER_PID=""
[ "$(stat -c %a "$DATA/backup.db")" = 600 ] || fail "the backup is mode $(stat -c %a "$DATA/backup.db")"
[ ! -e "$DATA/backup.db.tmp" ] || fail "backup.db.tmp left behind"
pass "backed up while jobs were submitted ($BEFORE jobs before, $AFTER after): $OUT"

set +e
PG=$(rmc admin backup --meta 'postgres://rm:s3cret@db.example:5432/ringmaster?sslmode=require&pool=8' --to /tmp/x.dump 2>&1)
RC=$?
set -e
[ "$RC" = 2 ] && grep -q "pg_dump -Fc -f /tmp/x.dump 'postgres://rm@db.example:5432/ringmaster?sslmode=require'" <<<"$PG" ||
  fail "backup of a PostgreSQL store: exit $RC: $PG"
if grep -q s3cret <<<"$PG"; then fail "the password was printed: $PG"; fi
pass "PostgreSQL: $PG"

# Restore: a fresh data dir holding the backup as its meta.db, a server of its own.
cp "$DATA/backup.db" "$RESTORED/meta.db"
"$RM" server --data "$RESTORED" --port 0 >> "$RESTORED/server.log" 2>&1 &
RESTORED_PID=$!
for _ in $(seq 1 100); do
  [ -f "$RESTORED/server.json" ] && curl -sf "$(jq -r .url "$RESTORED/server.json")/healthz" > /dev/null && break
  sleep 0.1
done
ADMIN=$(cat "$DATA/admin.token")
on_copy() { RINGMASTER_TOKEN=${TOKEN:-$ADMIN} "$RM" --data "$RESTORED" "$@"; }
[ ! -e "$RESTORED/admin.token" ] || fail "the restored server made a new admin: its users were not there"
COPIED=$(on_copy ls -a --json | jq .total)
[ "$COPIED" -ge "$BEFORE" ] && [ "$COPIED" -le "$AFTER" ] || fail "the copy holds $COPIED jobs, not $BEFORE..$AFTER"
# The first and the last job in the copy are the live ones.
for id in "$RUN" "$COPIED"; do
  [ "$(on_copy show "$id" --json | jq -c '{id, name, state}')" = "$(rmc show "$id" --json | jq -c '{id, name, state}')" ] ||
    fail "job $id differs in the copy: $(on_copy show "$id")"
done
[ "$(on_copy show "$RUN" --json | jq -r .state)" = SUCCEEDED ] || fail "job $RUN in the copy: $(on_copy show "$RUN")"
[ "$(on_copy users ls)" = "$(rmc users ls)" ] || fail "users differ: $(on_copy users ls)"
[ "$(on_copy tokens ls -a)" = "$(rmc tokens ls -a)" ] || fail "tokens differ: $(on_copy tokens ls -a)"
TOKEN=$ALICE on_copy whoami | grep -q alice || fail "alice's token on the copy: $(TOKEN=$ALICE on_copy whoami)"
NEW=$(echo '{"name": "on-copy", "command": "true", "resources": {"cpu": 64}}' | TOKEN=$BOB on_copy submit --no-workdir -)
[ "$NEW" -gt "$COPIED" ] || fail "a job on the copy got id $NEW"
pass "a server on the restored copy: $COPIED jobs, the same users and tokens; alice's token works; new job $NEW"
echo "admin_backup_test: all passed"
