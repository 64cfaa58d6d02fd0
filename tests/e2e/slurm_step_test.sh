#!/usr/bin/env bash
# `ringmaster slurm-step`, the Slurm step wrapper, against a real server and
# without Slurm: the test sets the variables srun would.
#  - a missing variable: exit 2, one line naming it; not root: exit 2;
#  - a data dir not its own (or under one others may write): exit 2, naming it;
#  - it registers node <prefix><rank> with its rank's token, the CPUs, memory
#    and GPUs Slurm bound (by the node's indices: SLURM_STEP_GPUS=2,3) and the
#    slurm.* labels; runs the task the server assigns with CUDA_VISIBLE_DEVICES=2,3
#    and only nvidia2 and nvidia3 allowed by its device cgroup, exits 0 once
#    it is reported, and leaves no task process and no data dir behind;
#  - the server cancels the task: stopped, reported, exit 0;
#  - nothing assigned within --assign-timeout: exit 3, saying so;
#  - SIGTERM (Slurm's scancel): the task is stopped, exit 143, its end is not
#    reported (the job stays running for the server), no task process remains.
source "$(dirname "$0")/lib.sh"
trap 'rc=$?; set +e; [ -n "${STEP_PID:-}" ] && kill -KILL "$STEP_PID" 2>/dev/null; for d in "$DATA"/steps/*/; do [ -d "$d" ] && kill_tasks "${d%/}"; done; (exit $rc); cleanup' EXIT

start_server
TOK0=$(rmc tokens create --scope agent --node slurm-7-1-0 --name "step 7.0")
TOK1=$(rmc tokens create --scope agent --node slurm-7-1-1 --name "step 7.1")
STEPS=$DATA/steps
# Four fake GPUs' device nodes (NVIDIA's numbers, no driver: opening one the
# device cgroup allows fails with ENXIO, one it denies with EPERM).
mkdir -p "$DATA/dev"
for i in 0 1 2 3; do mknod "$DATA/dev/nvidia$i" c 195 "$i"; done
chmod 0755 "$DATA/dev"
chmod 0666 "$DATA"/dev/nvidia*

# step RANK [FLAG...]: the wrapper of RANK in Slurm job 7, in the background (STEP_PID).
step() {
  local rank=$1
  shift
  env -u CUDA_VISIBLE_DEVICES SLURM_PROCID="$rank" SLURM_JOB_ID=7 SLURMD_NODENAME=n2 SLURM_CPUS_PER_TASK=2 \
    SLURM_MEM_PER_CPU=500 SLURM_STEP_GPUS=2,3 RINGMASTER_STEP_TOKENS="$TOK0,$TOK1" \
    "$RM" slurm-step --server "$URL" --node-prefix slurm-7-1- --data-dir "$STEPS" --sandbox-root "$SANDBOXES" --gpu-devices "$DATA/dev" "$@" \
    >> "$DATA/step-$rank.log" 2>&1 &
  STEP_PID=$!
}
# step_wait: waits (30 s at most) for the wrapper; its exit code in RC.
step_wait() {
  for _ in $(seq 1 300); do kill -0 "$STEP_PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$STEP_PID" 2>/dev/null && { cat "$DATA"/step-*.log >&2; fail "the wrapper did not exit"; }
  RC=0
  wait "$STEP_PID" || RC=$?
  STEP_PID=""
}

# ---- a missing variable
rc=0
err=$(env -u SLURM_PROCID SLURM_JOB_ID=7 "$RM" slurm-step --server "$URL" --node-prefix p- --data-dir "$STEPS" 2>&1) || rc=$?
[ "$rc" = 2 ] || fail "without SLURM_PROCID: exit $rc, not 2 ($err)"
[ "$(wc -l <<<"$err")" = 1 ] && grep -q "SLURM_PROCID is not set" <<<"$err" || fail "without SLURM_PROCID: $err"
pass "a missing Slurm variable: exit 2, naming it"

# ---- not root: refused (it could not run each task as its own user's uid)
rc=0
err=$(setpriv --reuid=nobody --regid=nogroup --clear-groups env SLURM_PROCID=0 SLURM_JOB_ID=7 "$RM" slurm-step \
  --server "$URL" --node-prefix p- --data-dir "$STEPS" 2>&1) || rc=$?
[ "$rc" = 2 ] || fail "as nobody: exit $rc, not 2 ($err)"
[ "$err" = "ringmaster: slurm-step runs as root (Slurm's jobs of a root server): it runs each task as its user's own uid" ] ||
  fail "as nobody: $err"
pass "not root: exit 2, saying why"

# ---- a data dir another user made (or may write) is refused
# refused_dir DIR WHAT [NAMED]: the wrapper given --data-dir DIR exits 2 with
# one line naming NAMED (default DIR), the directory at fault.
refused_dir() {
  local rc=0 err
  err=$(env SLURM_PROCID=0 SLURM_JOB_ID=7 SLURMD_NODENAME=n2 SLURM_CPUS_PER_TASK=2 SLURM_MEM_PER_CPU=500 \
    RINGMASTER_STEP_TOKENS="$TOK0" "$RM" slurm-step --server "$URL" --node-prefix slurm-7-1- --data-dir "$1" 2>&1) || rc=$?
  [ "$rc" = 2 ] || fail "$2: exit $rc, not 2 ($err)"
  [ "$(wc -l <<<"$err")" = 1 ] && grep -qF "${3:-$1}" <<<"$err" || fail "$2: not one line naming ${3:-$1}: $err"
  [ -e "$1/7.0" ] && fail "$2: the wrapper made its rank's dir in $1"
  echo "$err"
}
mkdir -p "$DATA/theirs" "$DATA/shared/steps" "$DATA/open"
chown nobody "$DATA/theirs"
err=$(refused_dir "$DATA/theirs" "a data dir owned by nobody")
grep -q "uid $(id -u nobody)" <<<"$err" || fail "the refusal does not say who owns it: $err"
chmod 0777 "$DATA/open"
refused_dir "$DATA/open" "a data dir anybody may write" > /dev/null
chmod 0777 "$DATA/shared"  # not sticky: anybody could swap steps/
refused_dir "$DATA/shared/steps" "a data dir under a directory anybody may write" "$DATA/shared" > /dev/null
pass "a data dir owned by another user, writable by others, or under a directory others may write: exit 2, naming it"

# ---- one task, run to its end
PROBE='import errno, os
for i in range(4):
    try:
        os.close(os.open("%s/nvidia%d" % (os.environ["GPU_DIR"], i), os.O_RDWR)); r = "opened"
    except OSError as e:
        r = {errno.ENXIO: "allowed", errno.EPERM: "denied"}.get(e.errno, e.strerror)
    print("nvidia%d" % i, r)'
ID=$(rmc submit - <<<"$(jq -n --arg p "$PROBE" --arg d "$DATA/dev" '{name: "step", env: {GPU_DIR: $d, PROBE: $p},
  command: "echo hello from $RINGMASTER_RANK gpus=$CUDA_VISIBLE_DEVICES tokens=${RINGMASTER_STEP_TOKENS:-none}; /usr/bin/python3 -c \"$PROBE\"; (sleep 3217 &); sleep 1",
  resources: {cpu: 1, memory: "256Mi", gpu: 2}}')")
step 0 --assign-timeout 60
for _ in $(seq 1 300); do rmc nodes --json 2>/dev/null | jq -e '.nodes[] | select(.name == "slurm-7-1-0")' > /dev/null && break; sleep 0.1; done
NODE=$(rmc nodes --json | jq -c '.nodes[] | select(.name == "slurm-7-1-0")')
[ -n "$NODE" ] || { cat "$DATA/step-0.log"; fail "node slurm-7-1-0 did not register"; }
jq -e '.labels == {"slurm.job": "7", "slurm.node": "n2", "slurm.rank": "0"}' <<<"$NODE" > /dev/null || fail "labels: $NODE"
jq -e '[.gpus[].index] == [2, 3]' <<<"$NODE" > /dev/null || fail "not the GPUs 2 and 3 Slurm bound: $NODE"
jq -e '.cpu == "2" and .memory_bytes == 1048576000' <<<"$NODE" > /dev/null || fail "cpus/memory: $NODE"
PORTS=$(jq -r .ports <<<"$NODE")
[ "${PORTS%-*}" = "${PORTS#*-}" ] || fail "not one port: $PORTS"
pass "slurm-7-1-0 registered with Slurm's 2 cpus, 1000 MiB, 2 GPUs, the slurm.* labels and one port ($PORTS)"
step_wait
[ "$RC" = 0 ] || { cat "$DATA/step-0.log"; fail "after its task the wrapper exited $RC, not 0"; }
[ "$(rmc show "$ID" --json | jq -r .state)" = SUCCEEDED ] || { rmc show "$ID"; fail "the job did not succeed"; }
rmc logs "$ID" | grep -q "hello from 0 gpus=2,3 tokens=none" || { rmc logs "$ID"; cat "$DATA/step-0.log"; rmc show "$ID"; fail "no task output in the job's logs"; }
LOGS=$(rmc logs "$ID")
for want in "nvidia0 denied" "nvidia1 denied" "nvidia2 allowed" "nvidia3 allowed"; do
  grep -q "$want$" <<<"$LOGS" || fail "the task's device cgroup: not \"$want\": $LOGS"
done
pgrep -f "sleep 3217" > /dev/null && fail "a task's process outlived the wrapper"
[ -e "$STEPS/7.0" ] && fail "the rank's data dir remains: $(ls -la "$STEPS/7.0")"
pass "the task ran (CUDA_VISIBLE_DEVICES=2,3 as Slurm's SLURM_STEP_GPUS, only nvidia2 and nvidia3 allowed), was reported, the wrapper exited 0 leaving no process or data dir"

# ---- the server cancels the task
ID3=$(rmc submit - <<<'{"name": "cancelled", "command": "exec sleep 3219", "resources": {"cpu": 1, "memory": "256Mi"}}')
step 0
for _ in $(seq 1 300); do [ "$(rmc show "$ID3" --json | jq -r .state)" = RUNNING ] && break; sleep 0.1; done
[ "$(rmc show "$ID3" --json | jq -r .state)" = RUNNING ] || { cat "$DATA/step-0.log"; fail "the job to cancel did not run"; }
rmc cancel "$ID3" > /dev/null
step_wait
[ "$RC" = 0 ] || { cat "$DATA/step-0.log"; fail "after its task was cancelled the wrapper exited $RC, not 0"; }
[ "$(rmc show "$ID3" --json | jq -r .state)" = CANCELLED ] || { rmc show "$ID3"; fail "the job is not cancelled"; }
pgrep -f "sleep 3219" > /dev/null && fail "the cancelled task outlived the wrapper"
pass "cancel: the task was stopped and reported, the wrapper exited 0"

# ---- nothing to do
step 1 --assign-timeout 2
step_wait
[ "$RC" = 3 ] || { cat "$DATA/step-1.log"; fail "with nothing assigned: exit $RC, not 3"; }
grep -q "no task was assigned to node slurm-7-1-1 within 2 s" "$DATA/step-1.log" || { cat "$DATA/step-1.log"; fail "exit 3 without saying why"; }
pass "nothing assigned within --assign-timeout 2: exit 3, saying so"

# ---- Slurm ends the step
ID2=$(rmc submit - <<<'{"name": "long", "command": "echo started; exec sleep 3218", "resources": {"cpu": 1, "memory": "256Mi"}}')
step 0 --grace 2
for _ in $(seq 1 300); do pgrep -f "sleep 3218" > /dev/null && break; sleep 0.1; done
pgrep -f "sleep 3218" > /dev/null || { cat "$DATA/step-0.log"; rmc show "$ID2"; fail "the long task did not start"; }
for _ in $(seq 1 100); do [ "$(rmc show "$ID2" --json | jq -r .state)" = RUNNING ] && break; sleep 0.1; done
kill -TERM "$STEP_PID"
step_wait
[ "$RC" = 143 ] || { cat "$DATA/step-0.log"; fail "after SIGTERM: exit $RC, not 143"; }
pgrep -f "sleep 3218" > /dev/null && fail "the task outlived the wrapper's SIGTERM"
[ -e "$STEPS/7.0" ] && fail "the rank's data dir remains after SIGTERM"
sleep 1
STATE=$(rmc show "$ID2" --json | jq -r .state)
[ "$STATE" = RUNNING ] || fail "the task's end was reported after SIGTERM: the job is $STATE"
rmc cancel --no-wait "$ID2" > /dev/null
pass "SIGTERM: the task stopped, exit 143, its end left unreported (the job is still $STATE for the server)"
