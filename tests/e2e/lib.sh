# Shared helpers for e2e tests: a real `ringmaster up` in a temp data dir on
# an ephemeral loopback port, driven through the real CLI. Cleanup ends only
# what the test started, by pid: the server, then any task still running
# (found through the pids the shims recorded).
#
# Tasks run as unprivileged uids (200000 + the Ringmaster user's id) and the
# checkout may sit where they cannot enter (/root), so:
#  - jobs are submitted from $TOOLS, a world-readable temp dir, which the CLI
#    makes their working_dir; `stage_tool` copies test-only tools there;
#  - sandboxes live in $SANDBOXES ($DATA/sandboxes: the server leaves $DATA
#    traversable but not listable), passed as --sandbox-root;
#  - the product's own tools (ringmaster-train, ringmaster_torch) are staged by
#    the agent itself and are on every task's PATH and PYTHONPATH.
set -euo pipefail
umask 077  # what the tests write next to the server's files is private too

RM=${RINGMASTER_BIN:?set RINGMASTER_BIN to the ringmaster binary}
REPO=${REPO_ROOT:?set REPO_ROOT}
DATA=$(mktemp -d /tmp/rm-e2e.XXXXXX)
SANDBOXES=$DATA/sandboxes
TOOLS=$(mktemp -d /tmp/rm-e2e-tools.XXXXXX)
chmod 0755 "$TOOLS"
cd "$TOOLS"
UP_PID=""
# `ringmaster login` keeps tokens under $XDG_CONFIG_HOME: the test's own, never the user's.
export XDG_CONFIG_HOME=$DATA/config

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }
rmc() { "$RM" --data "$DATA" "$@"; }

start_up() {
  "$RM" up --data "$DATA" --port 0 --sandbox-root "$SANDBOXES" "$@" >> "$DATA/up.log" 2>&1 &
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

# Jobs' network namespaces (agent --task-network isolated) are bind mounts in
# the agents' data dirs, kept by a stopped agent as its tasks are: unmounted here.
release_netns() {
  local m
  findmnt -rn -o TARGET | grep "^$DATA/" | sort -r | while read -r m; do umount -l "$m"; done
}

cleanup() {
  local rc=$?
  set +e  # everything below runs, whatever fails
  stop_up
  kill_tasks
  release_netns
  if [ $rc -ne 0 ] && [ -f "$DATA/up.log" ]; then
    echo "---- up.log (last 40 lines)" >&2
    tail -n 40 "$DATA/up.log" >&2
  fi
  cd /
  [ -n "${KEEP_E2E_DATA:-}" ] && echo "kept $DATA" >&2 || rm -rf "$DATA" "$TOOLS"
  exit $rc
}
trap cleanup EXIT

# A cluster of a standalone server and agents with data dirs of their own
# (fault_test, files_jobs_test). Tests that use it end with
#   trap 'rc=$?; set +e; stop_agents; (exit $rc); cleanup' EXIT
declare -A AGENT_PID
# start_server [FLAG...]: on port $SERVER_PORT, else any free one.
start_server() {
  "$RM" server --data "$DATA" --port "${SERVER_PORT:-0}" "$@" >> "$DATA/server.log" 2>&1 &
  UP_PID=$!
  for _ in $(seq 1 100); do
    [ -f "$DATA/server.json" ] && curl -sf "$(jq -r .url "$DATA/server.json")/healthz" > /dev/null && break
    sleep 0.1
  done
  URL=$(jq -r .url "$DATA/server.json")
}
# free_port: a loopback port no socket holds now, below the kernel's ephemeral
# range (which the tests' own connections draw from), so it stays free for a
# server that restarts on it a while later.
free_port() {
  local p used
  used=$(ss -Htan | awk '{print $4}' | sed 's/.*://' | sort -u)
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 10000))
    grep -qx "$p" <<<"$used" || { echo "$p"; return 0; }
  done
  fail "no free port in 20000-29999"
}
# start_agent NAME PORTS SANDBOX_ROOT [FLAG...]: 2 cpus, 4Gi, label zone=<NAME without node->,
# and a token that acts only as that node's agent; its data dir is $DATA/agent-NAME.
start_agent() {
  [ -f "$DATA/$1.token" ] || rmc tokens create --scope agent --node "$1" --name "agent $1" > "$DATA/$1.token"
  "$RM" agent --server "$URL" --token-file "$DATA/$1.token" --data "$DATA/agent-$1" --node-name "$1" \
    --sandbox-root "$3" --cpus 2 --memory 4Gi --ports "$2" --label "zone=${1#node-}" "${@:4}" >> "$DATA/agent-$1.log" 2>&1 &
  AGENT_PID[$1]=$!
}
# await_nodes N: until N nodes are ready.
await_nodes() {
  for _ in $(seq 1 300); do [ "$(rmc nodes 2>/dev/null | grep -c ' ready ')" = "$1" ] && break; sleep 0.1; done  # 30 s: agents start slowly on a loaded machine
  [ "$(rmc nodes | grep -c ' ready ')" = "$1" ] || { rmc nodes; fail "$1 agents did not register"; }
}
# Always succeeds: it runs in EXIT traps, where a failing command under
# `set -e` would end the trap before `cleanup` stops the server.
stop_agents() {
  local n
  for n in "${!AGENT_PID[@]}"; do
    if kill -0 "${AGENT_PID[$n]}" 2>/dev/null; then
      kill -TERM "${AGENT_PID[$n]}"
      wait "${AGENT_PID[$n]}" 2>/dev/null || true
    fi
  done
  for n in "$DATA"/agent-*/; do
    if [ -d "$n" ]; then kill_tasks "${n%/}"; fi
  done
  return 0
}

# stage_tool FILE [SUBDIR]: copies a test-only tool (a benchmark binary, an
# example script) into $TOOLS[/SUBDIR], readable by every task's uid; prints its path.
stage_tool() {
  local dest=$TOOLS${2:+/$2}
  mkdir -p "$dest"
  chmod 0755 "$dest"
  cp "$1" "$dest/"
  chmod a+rX "$dest/$(basename "$1")"
  echo "$dest/$(basename "$1")"
}

# fake_gpus: two fake GPUs for an agent: NVML says so (the fake library,
# $FAKE_NVML, linked as $DATA/nvml/libnvidia-ml.so.1: start the agent with
# LD_LIBRARY_PATH=$DATA/nvml), and their device nodes are NVIDIA's numbers in
# $TOOLS/dev (agent --gpu-devices; no driver behind them: opening one fails with ENXIO).
fake_gpus() {
  : "${FAKE_NVML:?set FAKE_NVML to the fake libnvidia-ml.so.1}"
  mkdir -p "$TOOLS/dev" "$DATA/nvml"
  mknod "$TOOLS/dev/nvidia0" c 195 0
  mknod "$TOOLS/dev/nvidia1" c 195 1
  mknod "$TOOLS/dev/nvidiactl" c 195 255
  chmod 0755 "$TOOLS/dev"
  chmod 0666 "$TOOLS/dev"/nvidia*
  ln -s "$FAKE_NVML" "$DATA/nvml/libnvidia-ml.so.1"
}

# task_key JOB [RANK]: "TASK.ATTEMPT" of a job's task (rank 0 by default).
task_key() { rmc show "$1" --json | jq -r --argjson r "${2:-0}" '.tasks[] | select(.rank == $r) | "\(.id).\(.attempt)"'; }

# The checkpoint a job's `latest` names in the files service ("" while none).
latest_checkpoint() { rmc files cat "jobs/$1/checkpoints/latest" 2>/dev/null | tr -d '\n' || true; }
# job_field ID FIELD: one top-level field of `show --json`.
job_field() { rmc show "$1" --json | jq -r ".$2"; }
# submit_train2 NAME EPOCHS: a 2-worker LeNet-5 training job, cpu 2 of each
# node's 2 (one worker per node, so two agents carry it); prints its id.
submit_train2() {
  jq -n --arg name "$1" --argjson e "$2" '{name: $name, kind: "distributed", replicas: 2,
    resources: {cpu: 2, memory: "1Gi"},
    command: ["ringmaster-train", "--model", "lenet5", "--epochs", ($e | tostring), "--threads", "1",
              "--checkpoint-every", "200", "--progress", "lines"]}' | rmc submit -
}

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

# alice_and_bob: two users with submit tokens ($ALICE, $BOB) and commands as each (as_alice, as_bob).
alice_and_bob() {
  rmc users create alice > /dev/null 2>&1
  rmc users create bob > /dev/null 2>&1
  ALICE=$(rmc tokens create --user alice)
  BOB=$(rmc tokens create --user bob)
}
as_alice() { RINGMASTER_TOKEN=$ALICE rmc "$@"; }
as_bob() { RINGMASTER_TOKEN=$BOB rmc "$@"; }

write_spec() {  # write_spec FILE <<EOF ... EOF
  cat > "$1"
}
