#!/usr/bin/env bash
# Priority preemption with a real server, agent and trainer on a 3-cpu cluster:
# a 1-cpu job without checkpoints (B) and a 2-worker training job that
# checkpoints often (A) fill it. A priority-10 job arrives: the scheduler
# preempts A, whose work since its last checkpoint is the smallest, not B.
# A checkpoints on SIGTERM, goes back to the queue (not a restart), resumes
# from that checkpoint once the urgent job is done, and succeeds.
source "$(dirname "$0")/lib.sh"
: "${RINGMASTER_TRAIN:?set RINGMASTER_TRAIN}"  # built; the agent stages it for tasks
start_up --cpus 3 --memory 6Gi --ports 32350-32399

B=$(echo '{"name": "no-ckpt", "command": "sleep 600", "resources": {"cpu": 1, "memory": "64Mi"}}' | rmc submit -)
wait_state "$B" RUNNING 30
A=$(jq -n '{name: "trainer", kind: "distributed", replicas: 2, resources: {cpu: 1, memory: "1Gi"},
  command: ["ringmaster-train", "--model", "lenet5", "--epochs", "6", "--checkpoint-every", "5", "--threads", "1",
            "--progress", "none"]}' | rmc submit -)
for _ in $(seq 1 600); do [ -n "$(latest_checkpoint "$A")" ] && break; sleep 0.1; done
[ -n "$(latest_checkpoint "$A")" ] || { rmc logs "$A"; fail "job $A uploaded no checkpoint in 60s"; }
# B has now run >= 3 s without a checkpoint; A checkpoints every 5 steps (a fraction of a
# second). A trains for ~17 s unloaded (6 epochs): the preemption lands mid-training even on a busy machine.
sleep 3
pass "job $B (no checkpoints) and training job $A (checkpointing) fill the 3 cpus"

URGENT=$(echo '{"name": "urgent", "priority": 10, "command": "echo urgent; sleep 2", "resources": {"cpu": 1, "memory": "64Mi"}}' | rmc submit -)
rmc wait "$URGENT" --timeout 60 > /dev/null || { rmc show "$URGENT"; rmc show "$A"; fail "the urgent job did not run"; }
SHOW=$(rmc show "$A")
grep -q "preempted for job $URGENT (priority 10 > 0); [0-9]* device-seconds since its last checkpoint" <<<"$SHOW" ||
  { echo "$SHOW"; rmc show "$B"; fail "job $A has no preemption event naming job $URGENT"; }
[ "$(job_field "$B" state)" = RUNNING ] || fail "job $B (more work at stake) was stopped too: $(job_field "$B" state)"
pass "job $URGENT ran; the scheduler preempted $A (least work lost), not $B: $(grep -o "preempted for job .* since its last checkpoint" <<<"$SHOW" | head -1)"

rmc wait "$A" --timeout 240 || { rmc show "$A"; rmc logs "$A" | tail -30; fail "preempted job $A did not succeed"; }
LOGS=$(rmc logs "$A")
STOP=$(grep -o "^\[0\] stopped at step [0-9]*" <<<"$LOGS" | grep -o "[0-9]*$" | head -1 || true)
[ -n "$STOP" ] || fail "job $A did not checkpoint when told to stop: $LOGS"
grep -q "^\[0\] resuming from .*ckpt-$STOP (step $STOP" <<<"$LOGS" || fail "job $A did not resume from its stop checkpoint $STOP: $LOGS"
grep -q "^\[0\] final test accuracy" <<<"$LOGS" || fail "no final accuracy: $LOGS"
[ "$(job_field "$A" restarts)" = 0 ] || fail "a preemption counted as a restart"
pass "job $A checkpointed at step $STOP when preempted, resumed there and succeeded"
rmc cancel "$B" > /dev/null
echo "preempt_test: all passed"
