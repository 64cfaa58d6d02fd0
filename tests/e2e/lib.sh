# Shared helpers for e2e tests: a real `ringmaster up` in a temp data dir on
# an ephemeral loopback port, driven through the real CLI. Cleanup ends only
# what the test started, by pid: the server, then any task still running
# (found through the pids the shims recorded).
set -euo pipefail

RM=${RINGMASTER_BIN:?set RINGMASTER_BIN to the ringmaster binary}
REPO=${REPO_ROOT:?set REPO_ROOT}
DATA=$(mktemp -d /tmp/rm-e2e.XXXXXX)
UP_PID=""

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }
rmc() { "$RM" --data "$DATA" "$@"; }

start_up() {
  "$RM" up --data "$DATA" --port 0 "$@" >> "$DATA/up.log" 2>&1 &
  UP_PID=$!
  for _ in $(seq 1 200); do
    if [ -f "$DATA/server.json" ] && rmc nodes 2>/dev/null | grep -q ' ready '; then return 0; fi
    kill -0 "$UP_PID" 2>/dev/null || { cat "$DATA/up.log"; fail "ringmaster up exited"; }
    sleep 0.1
  done
  cat "$DATA/up.log"
  fail "ringmaster up did not get ready in 20s"
}

stop_up() {
  if [ -n "$UP_PID" ] && kill -0 "$UP_PID" 2>/dev/null; then
    kill -TERM "$UP_PID"
    wait "$UP_PID" 2>/dev/null || true
  fi
  UP_PID=""
}

# kill_tasks [AGENT_DIR]: SIGKILL every task (process group) and shim an agent started.
kill_tasks() {
  local f dir=${1:-$DATA/agent}
  for f in "$dir"/tasks/*/task.pid; do
    [ -f "$f" ] && kill -KILL -- "-$(cat "$f")" 2>/dev/null || true
  done
  for f in "$dir"/tasks/*/shim.pid; do
    [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null || true
  done
}

cleanup() {
  local rc=$?
  stop_up
  kill_tasks
  if [ $rc -ne 0 ] && [ -f "$DATA/up.log" ]; then
    echo "---- up.log (last 40 lines)" >&2
    tail -n 40 "$DATA/up.log" >&2
  fi
  rm -rf "$DATA"
  exit $rc
}
trap cleanup EXIT

# job_field ID FIELD: one top-level field of `show --json`.
job_field() { rmc show "$1" --json | jq -r ".$2"; }

# wait_state ID STATE [SECONDS]: waits (a hang guard, not a timing check) for a state.
wait_state() {
  local id=$1 want=$2 limit=${3:-30} s
  for _ in $(seq 1 $((limit * 10))); do
    s=$(job_field "$id" state)
    [ "$s" = "$want" ] && return 0
    sleep 0.1
  done
  rmc show "$id"
  fail "job $id is $s, not $want, after ${limit}s"
}

# wait_reason ID REGEX [SECONDS]: waits (a hang guard) until the job's reason matches.
wait_reason() {
  local id=$1 want=$2 limit=${3:-30} r
  for _ in $(seq 1 $((limit * 10))); do
    r=$(job_field "$id" reason)
    grep -Eq -- "$want" <<<"$r" && return 0
    sleep 0.1
  done
  fail "job $id reason is '$r', not /$want/, after ${limit}s"
}

write_spec() {  # write_spec FILE <<EOF ... EOF
  cat > "$1"
}
