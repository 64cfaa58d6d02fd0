#!/usr/bin/env bash
# Tasks never run as root, and one user's tasks cannot reach another's, on
# `ringmaster up` (as root) with users alice and bob:
#  1. alice's task runs as its own non-root uid; it cannot read the server's
#     admin.token or meta.db, list the data dir, read bob's running task's
#     /proc/PID/environ (which holds a secret), bob's sandbox, work dir or
#     log; its own sandbox, work and checkpoint dirs exist and are its uid's.
#  2. a metrics file replaced by a symlink to admin.token ships nothing.
#  3. a working_dir the task's uid cannot enter fails in one clear line.
#  4. 20 quick jobs leave no zombie children of the `up` process.
#  5. a task printing 100 MiB has its log cut at --max-log-size with a
#     marker line, and still succeeds.
source "$(dirname "$0")/lib.sh"
start_up --cpus 4 --memory 4Gi --ports 32450-32499 --max-log-size 1Mi

alice_and_bob
ADMIN_TOKEN=$(tr -d '\n' < "$DATA/admin.token")
INSTANCE=$(cat "$DATA/agent/sandbox-instance")

# ---- bob: a running task with a secret in its environment
write_spec "$DATA/bob.yaml" <<'YAML'
name: bob-secret
env: {BOB_SECRET: "bob-s3cret-do-not-share"}
command: |
  echo "files $RINGMASTER_WORK_DIR uid $(id -u)"
  echo private > "$HOME/bob-private"
  echo private > "$RINGMASTER_CHECKPOINT_DIR/bob-checkpoint"
  echo ready
  sleep 120
resources: {cpu: 0.5, memory: 32Mi}
YAML
BOB_JOB=$(as_bob submit --no-workdir "$DATA/bob.yaml")
wait_state "$BOB_JOB" RUNNING 30
for _ in $(seq 1 100); do as_bob logs "$BOB_JOB" | grep -q '^\[0\] ready$' && break; sleep 0.1; done
read -r _ BOB_FILES _ BOB_UID <<<"$(as_bob logs "$BOB_JOB" | sed -n 's/^\[0\] \(files .*\)$/\1/p')"
BOB_KEY=$(task_key "$BOB_JOB")
BOB_PID=$(cat "$DATA/agent/tasks/$BOB_KEY/task.pid")
BOB_SANDBOX=$SANDBOXES/$INSTANCE/$BOB_KEY
[ "$BOB_UID" -ge 200000 ] 2>/dev/null || fail "bob's task runs as uid '$BOB_UID'"
tr '\0' '\n' < "/proc/$BOB_PID/environ" | grep -qx 'BOB_SECRET=bob-s3cret-do-not-share' ||
  fail "bob's task (pid $BOB_PID) does not hold the secret: nothing to protect"
[ -f "$BOB_SANDBOX/bob-private" ] && [ -f "$BOB_FILES/checkpoints/bob-checkpoint" ] ||
  fail "bob's files are not where the test looks"
pass "bob's job $BOB_JOB runs as uid $BOB_UID with a secret in its environment"

# ---- 1. alice's task probes everything it must not reach
cat > "$TOOLS/probe.sh" <<'SH'
echo "uid $(id -u) gid $(id -g) groups $(id -G)"
probe() {  # probe WHAT COMMAND...: one line, "refused WHAT" or "GOT WHAT"
  local what=$1; shift
  if "$@" > /dev/null 2>&1; then echo "GOT $what"; else echo "refused $what"; fi
}
probe admin.token cat "$DATA/admin.token"
probe meta.db cat "$DATA/meta.db"
probe data-listing ls "$DATA"
probe server-logs ls "$DATA/logs"
probe agent-dir ls "$DATA/agent"
probe bob-log cat "$BOB_LOG"
probe bob-environ cat "/proc/$BOB_PID/environ"
probe bob-sandbox ls "$BOB_SANDBOX"
probe bob-private cat "$BOB_SANDBOX/bob-private"
probe bob-files ls "$BOB_FILES"
probe bob-checkpoint cat "$BOB_FILES/checkpoints/bob-checkpoint"
echo "secrets seen: $(for p in /proc/[0-9]*; do cat "$p/environ" 2> /dev/null; done | tr '\0' '\n' | grep -c '^BOB_SECRET=')"
echo "home $(stat -c '%u %a' "$HOME") pwd $(pwd)"
echo "checkpoints $(stat -c '%u %a' "$RINGMASTER_CHECKPOINT_DIR")"
echo "outputs $(stat -c '%u' "$RINGMASTER_OUTPUT_DIR") work $(stat -c '%u' "$RINGMASTER_WORK_DIR")"
touch "$RINGMASTER_CHECKPOINT_DIR/mine" && echo "wrote a checkpoint"
# 2. point the metrics file the agent (root) reads at the admin token
ln -sf "$DATA/admin.token" "$RINGMASTER_METRICS_FILE"
sleep 1
SH
chmod 0755 "$TOOLS/probe.sh"
ID=$(jq -n --arg data "$DATA" --arg log "$DATA/agent/tasks/$BOB_KEY/output.log" --arg pid "$BOB_PID" \
  --arg sandbox "$BOB_SANDBOX" --arg files "$BOB_FILES" --arg job "$BOB_JOB" --arg probe "$TOOLS/probe.sh" \
  '{name: "alice-probe", command: ["/bin/bash", $probe], resources: {cpu: 0.5, memory: "32Mi"},
    env: {DATA: $data, BOB_LOG: $log, BOB_PID: $pid, BOB_SANDBOX: $sandbox, BOB_FILES: $files, BOB_JOB: $job}}' |
  as_alice submit --no-workdir -)
as_alice wait "$ID" --timeout 60 > /dev/null || { as_alice logs "$ID"; fail "alice's probe job $ID failed"; }
LOGS=$(as_alice logs "$ID")
echo "$LOGS" | sed 's/^/   /'
read -r _ ALICE_UID _ ALICE_GID _ ALICE_GROUPS <<<"$(sed -n 's/^\[0\] \(uid .*\)$/\1/p' <<<"$LOGS")"
[ -n "$ALICE_UID" ] && [ "$ALICE_UID" != 0 ] || fail "alice's task runs as uid '$ALICE_UID'"
[ "$ALICE_UID" != "$BOB_UID" ] || fail "alice and bob share uid $ALICE_UID"
[ "$ALICE_GID" != 0 ] && [ "$ALICE_GROUPS" = "$ALICE_GID" ] || fail "alice's task has groups '$ALICE_GROUPS'"
pass "alice's task runs as uid $ALICE_UID (bob's: $BOB_UID), in no group but its own"
for what in admin.token meta.db data-listing server-logs agent-dir bob-log bob-environ bob-sandbox bob-private \
    bob-files bob-checkpoint; do
  grep -qx "\[0\] refused $what" <<<"$LOGS" || fail "alice's task could reach $what"
done
grep -qx '\[0\] secrets seen: 0' <<<"$LOGS" || fail "alice's task saw bob's secret in some /proc/PID/environ"
pass "it cannot read admin.token, meta.db, the data dir's listing, bob's environ, sandbox, files or log"
grep -qx "\[0\] home $ALICE_UID 700 pwd $SANDBOXES/$INSTANCE/$(task_key "$ID")/work" <<<"$LOGS" ||
  fail "alice's sandbox is not hers (or not her working dir)"
grep -qx "\[0\] checkpoints $ALICE_UID 700" <<<"$LOGS" || fail "alice's checkpoint dir is missing or not hers"
grep -qx "\[0\] outputs $ALICE_UID work $ALICE_UID" <<<"$LOGS" || fail "alice's output or work dir is not hers"
grep -qx '\[0\] wrote a checkpoint' <<<"$LOGS" || fail "alice cannot write into her checkpoint dir"
pass "its sandbox and its work, checkpoint and output dirs exist before it starts and are its uid's (0700)"

# ---- 2. the symlinked metrics file shipped nothing
if as_alice show "$ID" --json | grep -qF "$ADMIN_TOKEN"; then fail "the admin token shows in alice's job"; fi
if grep -rqF "$ADMIN_TOKEN" "$DATA/metrics" "$DATA/logs" 2>/dev/null; then fail "the admin token reached the server's files"; fi
grep -q "task $(task_key "$ID"): not shipping its metrics: .*metrics.jsonl is a symlink" "$DATA/up.log" ||
  fail "the agent did not note the refused metrics file"
pass "a metrics file replaced by a symlink to admin.token shipped nothing (the agent noted it)"

# ---- 3. a working_dir the task's uid cannot enter
ID=$(jq -n --arg dir "$DATA/agent" '{name: "no-entry", working_dir: $dir, command: "true", resources: {cpu: 0.1, memory: "16Mi"}}' |
  as_alice submit -)
if as_alice wait "$ID" --timeout 60 > /dev/null 2>&1; then fail "job $ID ran in $DATA/agent"; fi
REASON=$(job_field "$ID" reason)
grep -qF "cannot enter working_dir $DATA/agent as uid $ALICE_UID (user alice): Permission denied" <<<"$REASON" ||
  fail "unclear reason: $REASON"
pass "an unreachable working_dir fails in one line: $REASON"

# ---- 4. no zombies
IDS=()
for i in $(seq 1 20); do
  IDS+=("$(echo "{\"name\": \"quick-$i\", \"command\": \"true\", \"resources\": {\"cpu\": 0.1, \"memory\": \"16Mi\"}}" |
    as_alice submit --no-workdir -)")
done
for id in "${IDS[@]}"; do as_alice wait "$id" --timeout 60 > /dev/null || fail "quick job $id failed"; done
ZOMBIES=$(ps -o pid=,stat=,args= --ppid "$UP_PID" | awk '$2 ~ /^Z/' || true)
[ -z "$ZOMBIES" ] || fail "zombie children of ringmaster up (pid $UP_PID): $ZOMBIES"
pass "20 quick jobs left no zombie children of ringmaster up"

# ---- 5. the log cap
write_spec "$DATA/chatty.yaml" <<'YAML'
name: chatty
command: |
  echo start
  yes 'a line of output that repeats, one hundred mebibytes of it' | head -c 104857600
  echo end
resources: {cpu: 1, memory: 64Mi}
YAML
ID=$(as_alice submit --no-workdir "$DATA/chatty.yaml")
as_alice wait "$ID" --timeout 120 > /dev/null || { as_alice show "$ID"; fail "the chatty job $ID did not succeed"; }
LOG=$(as_alice logs "$ID" --rank 0)
SIZE=$(wc -c <<<"$LOG")
[ "$SIZE" -le $((1300 * 1024)) ] || fail "the log is $SIZE bytes (with rank prefixes), beyond the 1 MiB cap"
[ "$(tail -n 1 <<<"$LOG")" = '[0] [ringmaster: log cut at 1Mi; later output dropped]' ] ||
  fail "no cut marker at the end: $(tail -c 300 <<<"$LOG")"
grep -qx '\[0\] start' <<<"$LOG" || fail "the log lost its beginning"
if grep -qx '\[0\] end' <<<"$LOG"; then fail "output after the cap was kept"; fi
pass "a task printing 100 MiB succeeded with its log cut at 1 MiB ($SIZE bytes shown) and a marker"

as_bob cancel "$BOB_JOB" > /dev/null
echo "isolation_test: all passed"
