#!/usr/bin/env bash
# Hardening (issue 10) as users meet it through the CLI and curl, on a real
# `ringmaster up`: 100 log followers leave heartbeats and scheduling alone; a
# deleted job's id is never reused and the next job runs; token scopes,
# revocation and disabled users take effect at once; a task's deeply nested
# metrics line leaves the server up; and the audit log records all of it.
source "$(dirname "$0")/lib.sh"
start_up --cpus 4 --max-followers-per-user 100
URL=$(jq -r .url "$DATA/server.json")
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$@"; }

rmc users create alice > /dev/null 2>&1
ALICE=$(rmc tokens create --user alice)
asalice() { RINGMASTER_TOKEN=$ALICE rmc "$@"; }

# 1. 100 followers of a job that never starts hold no server thread: the node
#    stays ready past its 10 s lease and new work is scheduled and runs.
NEVER=$(echo '{"name": "never", "command": "true", "resources": {"cpu": 64}}' | asalice submit --no-workdir -)
FOLLOWERS=()
for _ in $(seq 1 100); do
  curl -sN -H "Authorization: Bearer $ALICE" "$URL/api/v1/jobs/$NEVER/logs?follow=1" > /dev/null 2>&1 &
  FOLLOWERS+=($!)
done
stop_followers() { kill "${FOLLOWERS[@]}" 2>/dev/null || true; wait "${FOLLOWERS[@]}" 2>/dev/null || true; }
trap 'rc=$?; set +e; stop_followers; (exit $rc); cleanup' EXIT
STARTED=$SECONDS
probe() { curl -s -o /dev/null -w '%{http_code}' --max-time 1 -H "Authorization: Bearer $ALICE" "$URL/api/v1/jobs/$NEVER/logs?follow=1"; }
for _ in $(seq 1 60); do  # until all 100 are connected and the 101st is refused
  [ "$(probe)" = 429 ] && break
  # On a busy machine a follower may have given up connecting: it is replaced.
  for i in "${!FOLLOWERS[@]}"; do
    if ! kill -0 "${FOLLOWERS[$i]}" 2>/dev/null; then
      curl -sN -H "Authorization: Bearer $ALICE" "$URL/api/v1/jobs/$NEVER/logs?follow=1" > /dev/null 2>&1 &
      FOLLOWERS[$i]=$!
    fi
  done
  sleep 0.2
done
[ "$(probe)" = 429 ] || fail "the 101st follower of one user was not refused with 429"
RAN=$(echo '{"name": "while-followed", "command": "echo ran", "resources": {"cpu": 1}}' | asalice submit --no-workdir -)
asalice wait "$RAN" --timeout 30 > /dev/null 2>&1 || fail "a job submitted under 100 followers did not succeed"
while [ $((SECONDS - STARTED)) -lt 12 ]; do
  AGE=$(rmc nodes --json | jq '.nodes[0].last_heartbeat_age_ms')
  [ "$AGE" -lt 5000 ] || fail "heartbeats stalled under 100 followers (last one ${AGE} ms ago)"
  sleep 1
done
rmc nodes | grep -q ' ready ' || fail "the node is not ready after 12 s of 100 followers"
stop_followers
pass "100 followers: the 101st got 429, heartbeats kept coming for 12 s, a new job ran"

# 2. A deleted job's id is never reused; the next job gets a fresh one and runs.
ONE=$(echo '{"name": "one", "command": "echo one", "resources": {"cpu": 1}}' | asalice submit --no-workdir -)
asalice wait "$ONE" --timeout 30 > /dev/null 2>&1
asalice delete "$ONE" 2> /dev/null
TWO=$(echo '{"name": "two", "command": "echo two", "resources": {"cpu": 1}}' | asalice submit --no-workdir -)
[ "$TWO" -gt "$ONE" ] || fail "job id $ONE came back after a delete (got $TWO)"
asalice wait "$TWO" --timeout 30 > /dev/null 2>&1 || fail "the job after a delete did not run: $(asalice show "$TWO" | head -3)"
pass "after deleting job $ONE the next job got id $TWO and succeeded"

# 3. A task's metrics line nested 200k levels deep leaves the server up, and show works.
write_spec "$TOOLS/nested.yaml" <<'YAML'
name: nested-metrics
command: |
  { printf '{"x": '; yes '[' | head -n 200000 | tr -d '\n'; yes ']' | head -n 200000 | tr -d '\n'; echo '}'; } \
    > "$RINGMASTER_METRICS_FILE"
  echo '{"step": 1, "loss": 0.25}' >> "$RINGMASTER_METRICS_FILE"
resources: {cpu: 1}
YAML
NEST=$(asalice submit --no-workdir "$TOOLS/nested.yaml")
asalice wait "$NEST" --timeout 30 > /dev/null 2>&1 || fail "the nested-metrics job failed"
for _ in 1 2 3; do
  asalice show "$NEST" > /dev/null 2>&1 || fail "show on the nested-metrics job failed"
done
[ "$(asalice show "$NEST" --json | jq -r .metrics.loss)" = 0.25 ] || fail "the good metrics line was lost"
kill -0 "$UP_PID" || fail "the server died"
pass "a 200k-level metrics line: server up, show works, the valid record kept"

# 4. Scopes: an agent token cannot submit or act for another node; a read
#    token cannot cancel; revoked tokens and disabled users get 401 at once.
AGENT=$(rmc tokens create --scope agent --node elsewhere)
set +e
ERR=$(echo '{"command": "true"}' | RINGMASTER_TOKEN=$AGENT rmc submit --no-workdir - 2>&1); RC=$?
set -e
[ "$RC" != 0 ] && grep -q "agent token reaches only the agent protocol" <<<"$ERR" || fail "agent token submitted: $ERR"
NODE=$(rmc nodes --json | jq '.nodes[0].id')
[ "$(code -X POST -H "Authorization: Bearer $AGENT" -d '{}' "$URL/api/v1/agent/nodes/$NODE/heartbeat")" = 403 ] ||
  fail "an agent token for another node reached this node's heartbeat"
[ "$(code -X POST -H "Authorization: Bearer $(cat "$DATA/admin.token")" -d '{}' "$URL/api/v1/agent/nodes/$NODE/heartbeat")" = 403 ] ||
  fail "an admin token acted as an agent"
READER=$(rmc tokens create --user alice --scope read --name dashboard)
PENDING=$(echo '{"name": "p", "command": "true", "resources": {"cpu": 64}}' | asalice submit --no-workdir -)
set +e
ERR=$(RINGMASTER_TOKEN=$READER rmc cancel "$PENDING" --no-wait 2>&1); RC=$?
set -e
[ "$RC" != 0 ] && grep -q "scope is read" <<<"$ERR" || fail "a read token cancelled: $ERR"
RINGMASTER_TOKEN=$READER rmc show "$PENDING" > /dev/null || fail "a read token cannot read"
READER_ID=$(rmc tokens ls --user alice | awk -F'\t' '$3 == "dashboard" {print $1}')
rmc tokens revoke "$READER_ID" 2> /dev/null
set +e
ERR=$(RINGMASTER_TOKEN=$READER rmc ls 2>&1); RC=$?
set -e
[ "$RC" != 0 ] && grep -q "invalid or revoked token" <<<"$ERR" || fail "a revoked token still works: $ERR"
rmc users disable alice 2> /dev/null
set +e
ERR=$(asalice ls 2>&1); RC=$?
set -e
[ "$RC" != 0 ] && grep -q "user alice is disabled" <<<"$ERR" || fail "a disabled user's token still works: $ERR"
rmc users enable alice 2> /dev/null
asalice ls > /dev/null || fail "alice is enabled again but cannot list her jobs"
asalice cancel "$PENDING" > /dev/null 2>&1
pass "agent token: no submit, not another node's; read token cannot cancel; revoke and disable take effect at once"

# 5. The audit log: logins (a failure too), token and user changes, admin actions.
printf 'correct horse\n' | rmc users create carol --password-stdin > /dev/null 2>&1
set +e
printf 'wrong horse\n' | rmc login carol > /dev/null 2>&1 && fail "a wrong password logged in"
set -e
CAROL=$(printf 'correct horse\n' | rmc login --print-token carol)
RINGMASTER_TOKEN=$CAROL rmc whoami | grep -q '^carol ' || fail "carol's login token does not work"
AUDIT=$(rmc audit -n 100)
echo "$AUDIT" | sed 's/^/   audit: /' | head -20
for want in ' login  user carol  failed' ' login  user carol  ok' 'token.create  token [0-9]+ of alice  ok' \
            'token.revoke  token [0-9]+ of alice  ok' 'user.disable  user alice  ok' 'user.enable  user alice  ok' \
            'user.create  user carol  ok'; do
  grep -Eq "127.0.0.1  [a-z-]+ +$want|127.0.0.1  -  $want" <<<"$AUDIT" || grep -Eq -- "$want" <<<"$AUDIT" ||
    fail "the audit log lacks '$want'"
done
set +e
ERR=$(asalice audit 2>&1); RC=$?
set -e
[ "$RC" != 0 ] && grep -q "needs an admin token" <<<"$ERR" || fail "a user read the audit log: $ERR"
pass "the audit log shows logins (failed and ok), token and user changes, from 127.0.0.1; users cannot read it"
echo "hardening_test: all passed"
