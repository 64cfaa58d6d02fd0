#!/usr/bin/env bash
# Stragglers and idle allocations (issue 15, docs/monitoring.md), on a server
# that looks at 2 s windows and calls 8 s of unused devices idle:
#  - a 2-worker training job whose rank 1 is held to a tenth of a CPU (its
#    task cgroup's CFS quota) is flagged as a straggler naming rank 1, in its
#    events and in `show`; given its CPU back, the flag clears;
#  - a job holding a GPU (fake NVML: two GPUs, utilisation 0) is flagged idle.
source "$(dirname "$0")/lib.sh"
: "${RINGMASTER_TRAIN:?set RINGMASTER_TRAIN}"  # built; the agent stages it for tasks

fake_gpus
LD_LIBRARY_PATH=$DATA/nvml start_up --cpus 3 --memory 6Gi --ports 32380-32399 --gpu-devices "$TOOLS/dev" \
  --straggler-window 2 --idle-for 8

# ---- a straggler
ID=$(jq -n '{name: "straggle", kind: "distributed", replicas: 2, resources: {cpu: 1, memory: "1Gi"},
  command: ["ringmaster-train", "--model", "lenet5", "--epochs", "100", "--threads", "1",
            "--checkpoint-every", "0", "--progress", "none"]}' | rmc submit -)
wait_state "$ID" RUNNING 30
KEY=$(task_key "$ID" 1)
# Its cgroup, found from its own process (the shim records it in this agent's
# task dir): other tests' agents, running beside this one, have tasks and
# cgroups of the same key.
PIDFILE=$(find "$DATA" -path "*/tasks/$KEY/task.pid" 2>/dev/null | head -1)
[ -n "$PIDFILE" ] || fail "no task.pid for rank 1 (task $KEY) under $DATA"
CG=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ { print $3 }' "/proc/$(cat "$PIDFILE")/cgroup")
QUOTA=/sys/fs/cgroup/cpu$CG/cpu.cfs_quota_us
[ -n "$CG" ] && [ -f "$QUOTA" ] || fail "no cpu cgroup for rank 1's process (task $KEY: '$CG')"
# Both ranks train before one is slowed: their step times are in.
for _ in $(seq 1 300); do rmc logs "$ID" | grep -q "^\[0\] training lenet5" && break; sleep 0.1; done
sleep 4
[ "$(rmc show "$ID" --json | jq '.flags | length')" = 0 ] || { rmc show "$ID"; fail "flagged before any rank was slowed"; }
echo 10000 > "$QUOTA"  # 0.1 CPU of its 1: slower than rank 0 however loaded the machine is
# await_flag JOB KIND SECONDS: waits (a hang guard) for a flag of that kind on
# the job; prints "RANK MESSAGE" ("" if none came).
await_flag() {
  local flag=""
  for _ in $(seq 1 $(($3 * 10))); do
    flag=$(rmc show "$1" --json | jq -r --arg k "$2" '.flags[] | select(.kind == $k) | "\(.rank // "-") \(.message)"')
    [ -n "$flag" ] && break
    sleep 0.1
  done
  echo "$flag"
}
FLAG=$(await_flag "$ID" straggler 40)
[ -n "$FLAG" ] || { rmc show "$ID"; fail "rank 1, held to 0.1 CPU, was not flagged in 40 s"; }
[ "${FLAG%% *}" = 1 ] || fail "the straggler flagged is rank ${FLAG%% *}, not 1: $FLAG"
rmc show "$ID" | grep -q "^flagged:  straggler: rank 1 steps in" || { rmc show "$ID"; fail "show does not flag the straggler"; }
pass "rank 1 flagged: ${FLAG#* }"
echo 100000 > "$QUOTA"
for _ in $(seq 1 400); do
  [ "$(rmc show "$ID" --json | jq '[.flags[] | select(.kind == "straggler")] | length')" = 0 ] && break
  sleep 0.1
done
[ "$(rmc show "$ID" --json | jq '[.flags[] | select(.kind == "straggler")] | length')" = 0 ] ||
  { rmc show "$ID"; fail "the flag did not clear once rank 1 had its CPU back"; }
rmc show "$ID" --json | jq -e '[.events[].reason | select(startswith("straggler cleared: rank 1"))] | length == 1' > /dev/null ||
  fail "no event saying the straggler cleared"
pass "with its CPU back, rank 1's flag cleared"
rmc cancel "$ID" > /dev/null

# ---- an idle GPU
GPU=$(jq -n '{name: "idle-gpu", command: "sleep 120", resources: {cpu: 1, memory: "64Mi", gpu: 1}}' | rmc submit -)
wait_state "$GPU" RUNNING 30
IDLE=$(await_flag "$GPU" idle 30)
IDLE=${IDLE#- }
[ -n "$IDLE" ] || { rmc show "$GPU"; fail "the job holding an unused GPU was not flagged idle in 30 s"; }
[[ "$IDLE" == "idle: its 1 GPU is 0.0% used over the last 8 s (threshold 5%)" ]] || fail "idle flag says: $IDLE"
rmc ls --json | jq -e --argjson id "$GPU" '.jobs[] | select(.id == $id) | .flags[0].kind == "idle"' > /dev/null ||
  fail "the job list does not carry the idle flag"
pass "job $GPU flagged: $IDLE"
rmc cancel "$GPU" > /dev/null
echo "stragglers_test: all passed"
