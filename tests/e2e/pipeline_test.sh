#!/usr/bin/env bash
# Pipeline parallelism as a Ringmaster job: a 2-stage LeNet-5 pipeline
# (`ringmaster-train --parallel pipeline --stages 2`, one stage per node) on a
# server and two agents. Mid-training, after its first checkpoint, the agent
# of stage 1's node is killed with SIGKILL (its task runs on without it). The
# server hears nothing from that node for its fencing window (10 s here, its least,
# --node-lost-after) and a lease more, marks the task LOST and stops the
# gang; stage 0 checkpoints the whole pipeline as it stops. The agent comes
# back, the gang restarts on both nodes, every stage resumes from that
# checkpoint's part for it, and the job succeeds with >= 0.85 test accuracy,
# evaluated through the pipeline.
source "$(dirname "$0")/lib.sh"
: "${RINGMASTER_TRAIN:?set RINGMASTER_TRAIN}"
trap 'rc=$?; set +e; stop_agents; (exit $rc); cleanup' EXIT

start_server --node-lost-after 10
start_agent node-a 33100-33149 "$SANDBOXES"
start_agent node-b 33150-33199 "$SANDBOXES"
await_nodes 2
pass "a server and two agents (node-a, node-b)"

# cpu 2 of each agent's 2: one stage per node.
ID=$(jq -n '{name: "pipeline", kind: "distributed", replicas: 2, max_restarts: 2, resources: {cpu: 2, memory: "1Gi"},
  command: ["ringmaster-train", "--parallel", "pipeline", "--stages", "2", "--micro-batches", "4", "--model", "lenet5",
            "--epochs", "2", "--checkpoint-every", "100", "--threads", "1", "--progress", "none"]}' | rmc submit -)
for _ in $(seq 1 900); do [ -n "$(latest_checkpoint "$ID")" ] && break; sleep 0.1; done
BEFORE=$(latest_checkpoint "$ID")
[ -n "$BEFORE" ] || { rmc logs "$ID"; fail "job $ID uploaded no checkpoint in 90 s"; }
for s in 0 1; do
  rmc files ls "jobs/$ID/checkpoints/$BEFORE/stage-$s/" | grep -q model.pt ||
    fail "checkpoint $BEFORE of job $ID has no stage-$s/model.pt: $(rmc files ls "jobs/$ID/checkpoints/$BEFORE/" -r 2>&1)"
done
SHOW=$(rmc show "$ID" --json)
NODE=$(jq -r '.tasks[] | select(.rank == 1) | .node' <<<"$SHOW")
[ "$(jq -r '.tasks[] | select(.rank == 0) | .node' <<<"$SHOW")" != "$NODE" ] || fail "both stages are on $NODE"
pass "job $ID trains stage 0 and stage 1 on two nodes; checkpoint $BEFORE holds both stages"

kill -KILL "${AGENT_PID[$NODE]}"
wait "${AGENT_PID[$NODE]}" 2>/dev/null || true
pass "the agent of stage 1's node ($NODE) killed with SIGKILL"
for _ in $(seq 1 900); do [ "$(job_field "$ID" restarts)" -ge 1 ] && break; sleep 0.1; done
[ "$(job_field "$ID" restarts)" -ge 1 ] || { rmc show "$ID"; fail "job $ID was not restarted within 90 s of $NODE going silent"; }
start_agent "$NODE" "$([ "$NODE" = node-a ] && echo 33100-33149 || echo 33150-33199)" "$SANDBOXES"
pass "the gang was stopped once $NODE was lost; its agent is back"

rmc wait "$ID" --timeout 240 > /dev/null || { rmc show "$ID"; rmc logs "$ID" | tail -30; fail "job $ID did not succeed"; }
LOGS=$(rmc logs "$ID")
# The first restart is the lost node's. A loaded machine can cost a second
# (a rank of the new attempt missing its peers' deadline); each is shown, and
# what counts is that every attempt after the loss resumes from a checkpoint.
RESTARTS=$(job_field "$ID" restarts)
FIRST=$(rmc show "$ID" --json | jq -r '[.events[] | select(.to == "PENDING" and (.reason | startswith("restart 1 ")))][0].reason // ""')
grep -q "$NODE lost" <<<"$FIRST" || { rmc show "$ID"; fail "the first restart was not $NODE's loss: '$FIRST'"; }
if [ "$RESTARTS" != 1 ]; then
  echo "note: job $ID restarted $RESTARTS times:"
  rmc show "$ID" --json | jq -r '.events[] | select(.to == "PENDING" and (.reason | startswith("restart"))) | "  " + .reason'
fi
for r in 0 1; do
  N=$(grep -c "^\[$r\] resuming from .*ckpt-[0-9]* (step [1-9][0-9]*" <<<"$LOGS" || true)
  [ "$N" = "$RESTARTS" ] || fail "rank $r resumed $N times from a checkpoint in $RESTARTS restarts: $(grep "^\[$r\] resum" <<<"$LOGS")"
  grep -q "^\[$r\] pipeline stage $r of 2 (replica 0 of 1)" <<<"$LOGS" || fail "rank $r is not stage $r: $LOGS"
done
# Both stages of each attempt resume from the same step: the last resume of each rank.
STEPS=$(for r in 0 1; do grep -o "^\[$r\] resuming from .*(step [0-9]*" <<<"$LOGS" | tail -1 | grep -o "step [0-9]*"; done | sort -u)
[ "$(wc -l <<<"$STEPS")" = 1 ] || fail "the stages resumed from different steps: $STEPS"
ACC=$(grep -o "^\[0\] final test accuracy [0-9.]*" <<<"$LOGS" | awk '{print $NF}')
[ -n "$ACC" ] || fail "no final accuracy: $LOGS"
awk -v a="$ACC" 'BEGIN { exit !(a >= 0.85) }' || fail "final test accuracy $ACC < 0.85"
pass "the gang restarted after $NODE was lost ($RESTARTS restart(s)), both stages resumed from $STEPS, and the job succeeded: test accuracy $ACC"
echo "pipeline_test: all passed"
