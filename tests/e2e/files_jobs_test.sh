#!/usr/bin/env bash
# Jobs' files go through the files service (must show 3 of issue 11): a
# server and two agents on this machine that share nothing but the server:
# each its own data dir, input cache and sandbox root.
#  1. admin uploads Fashion-MNIST to datasets/fashion-mnist; a 2-worker
#     training job takes it as `inputs:` (staged on each node, cached by
#     SHA-256) and checkpoints through the files service (node-local writes,
#     uploaded by the agent, `latest` last).
#  2. kill -9 of the agent running rank 1 (its node is gone; its orphaned task
#     keeps running until the gang stops): once the node is lost (10 s of
#     silence, --node-lost-after, and a lease more) the gang restarts on the other agent, which stages the latest checkpoint; the
#     log says it resumed from that checkpoint's step; the job succeeds.
#  3. with both agents stopped, the predictions CSV and both ranks' logs
#     download from jobs/<id>/.
source "$(dirname "$0")/lib.sh"
: "${RINGMASTER_TRAIN:?set RINGMASTER_TRAIN}"
trap 'rc=$?; set +e; stop_agents; (exit $rc); cleanup' EXIT

start_server --node-lost-after 10
for node in node-a node-b; do mkdir -p -m 0711 "$DATA/sandboxes-$node"; done
start_agent node-a 32500-32549 "$DATA/sandboxes-node-a"
start_agent node-b 32550-32599 "$DATA/sandboxes-node-b"
await_nodes 2
pass "a server and two agents with their own data dirs (agent-node-a, agent-node-b)"

# ---- 1. a dataset, a job that takes it, checkpoints through the files service
rmc files put /usr/share/datasets/fashion-mnist datasets/fashion-mnist > /dev/null
[ "$(rmc files ls datasets/fashion-mnist/ | grep -c 'ubyte.gz')" = 4 ] || { rmc files ls datasets/; fail "the dataset did not upload"; }
# A task that fails still has its outputs uploaded; what it plants (a symlink to
# /etc/passwd, a FIFO, a hard link to a file of root's where the kernel allows
# one) is not uploaded.
OUT=$(jq -n '{name: "outputs", node_selector: {zone: "b"}, resources: {cpu: 0.1, memory: "16Mi"},
  outputs: ["outputs/", "extra/r.txt"],
  command: "mkdir -p extra && echo kept > outputs/ok.txt && echo r > extra/r.txt && ln -s /etc/passwd outputs/link && mkfifo outputs/fifo; ln /etc/passwd outputs/passwd 2>/dev/null; exit 3"}' |
  rmc submit --no-workdir -)
rmc wait "$OUT" --timeout 60 > /dev/null 2>&1 || true
[ "$(job_field "$OUT" state)" = FAILED ] || { rmc show "$OUT"; fail "job $OUT did not fail"; }
GOT=$(rmc files ls "jobs/$OUT/outputs/" | awk '{print $NF}' | sort | tr '\n' ' ')
[ "$GOT" = "jobs/$OUT/outputs/extra/r.txt jobs/$OUT/outputs/ok.txt " ] || fail "job $OUT uploaded: $GOT"
[ "$(rmc files cat "jobs/$OUT/outputs/ok.txt")" = kept ] || fail "ok.txt is not what the task wrote"
pass "a failed task's outputs were uploaded (ok.txt, extra/r.txt), and nothing it planted (symlink, FIFO, root's file)"

# Outputs over the owner's quota: refused (413, asked before the body goes),
# the job fails saying so, and the agent lives on (a found crash: SIGPIPE).
rmc users create alice > /dev/null 2>&1
ALICE=$(rmc tokens create --user alice)
rmc users quota alice 1Mi > /dev/null
BIG=$(jq -n '{name: "big-out", node_selector: {zone: "b"}, resources: {cpu: 0.1, memory: "16Mi"},
  command: "head -c 3000000 /dev/urandom > outputs/big.bin"}' | RINGMASTER_TOKEN=$ALICE rmc submit --no-workdir -)
RINGMASTER_TOKEN=$ALICE rmc wait "$BIG" --timeout 60 > /dev/null 2>&1 || true
REASON=$(RINGMASTER_TOKEN=$ALICE rmc show "$BIG" --json | jq -r .reason)
grep -q "outputs not uploaded: .*quota" <<<"$REASON" || fail "job $BIG over quota: $REASON"
kill -0 "${AGENT_PID[node-b]}" || fail "agent node-b died uploading over-quota outputs"
[ -z "$(RINGMASTER_TOKEN=$ALICE rmc files ls "jobs/$BIG/outputs/" 2>/dev/null)" ] || fail "part of job $BIG's outputs was stored"
pass "outputs over quota: job $BIG failed with \"$REASON\", nothing stored, the agent runs on"

# A 2 GiB output that is all holes (truncate) costs the node nothing: it is
# refused with a reason naming it, not stored as 2 GiB.
SPARSE=$(jq -n '{name: "sparse-out", node_selector: {zone: "b"}, resources: {cpu: 0.1, memory: "16Mi"},
  command: "truncate -s 2G outputs/holes.bin"}' | rmc submit --no-workdir -)
rmc wait "$SPARSE" --timeout 60 > /dev/null 2>&1 || true
REASON=$(rmc show "$SPARSE" --json | jq -r .reason)
grep -q "outputs not uploaded: .*holes.bin: a sparse file" <<<"$REASON" || fail "job $SPARSE's sparse output: $REASON"
[ -z "$(rmc files ls "jobs/$SPARSE/outputs/" 2>/dev/null)" ] || fail "job $SPARSE's sparse output was stored"
pass "a 2 GiB sparse output is refused: job $SPARSE failed with \"$REASON\""

# node-a keeps one cpu busy, so the two ranks land on different nodes.
BLOCKER=$(jq -n '{name: "blocker", node_selector: {zone: "a"}, resources: {cpu: 1, memory: "16Mi"}, command: "sleep 600"}' |
  rmc submit --no-workdir -)
wait_state "$BLOCKER" RUNNING 30
# keep_checkpoints: 0 keeps every checkpoint, so the one it resumes from can be looked up at the end.
ID=$(jq -n '{name: "files-train", kind: "distributed", replicas: 2, max_restarts: 2, resources: {cpu: 1, memory: "1Gi"},
  inputs: ["datasets/fashion-mnist"], outputs: ["outputs/"], keep_checkpoints: 0,
  command: ["ringmaster-train", "--model", "lenet5", "--epochs", "8", "--checkpoint-every", "100", "--threads", "1",
            "--source", "fashion-mnist", "--data-dir", "fashion-mnist", "--predict", "test", "--progress", "none"]}' |
  rmc submit --no-workdir -)
for _ in $(seq 1 600); do [ -n "$(latest_checkpoint "$ID")" ] && break; sleep 0.1; done
BEFORE=$(latest_checkpoint "$ID")
[ -n "$BEFORE" ] || { rmc logs "$ID"; fail "job $ID uploaded no checkpoint in 60s"; }
SHOW=$(rmc show "$ID" --json)
NODE0=$(jq -r '.tasks[] | select(.rank == 0) | .node' <<<"$SHOW")
NODE1=$(jq -r '.tasks[] | select(.rank == 1) | .node' <<<"$SHOW")
[ "$NODE0" != "$NODE1" ] || fail "both ranks of job $ID run on $NODE0"
grep -q "task [0-9.]*: staging 4 input files" "$DATA/agent-$NODE1.log" || fail "$NODE1 did not stage the inputs"
[ "$(find "$DATA/agent-$NODE1/cache/200001" -maxdepth 1 -type f -name '[0-9a-f]*' | wc -l)" = 4 ] ||
  fail "$NODE1's input cache for uid 200001 (admin's tasks) does not hold the 4 files by SHA-256"
[ ! -e "$DATA/files" ] || fail "the server keeps a files tree tasks write to"
rmc files ls "jobs/$ID/checkpoints/$BEFORE/" | grep -q model.pt || fail "checkpoint $BEFORE has no model.pt in the store"
pass "job $ID: rank 0 on $NODE0, rank 1 on $NODE1, inputs staged from datasets/fashion-mnist, $BEFORE uploaded"

# ---- 2. the agent of rank 1 dies (LeNet-5 for 8 epochs outlasts the node's 20 s to be lost)
kill -KILL "${AGENT_PID[$NODE1]}"
unset "AGENT_PID[$NODE1]"
SURVIVOR=$([ "$NODE1" = node-a ] && echo node-b || echo node-a)
rmc cancel "$BLOCKER" > /dev/null  # room for the whole gang on $SURVIVOR
pass "agent $NODE1 (rank 1 of job $ID) killed with SIGKILL after checkpoint $BEFORE"
rmc wait "$ID" --timeout 240 > /dev/null || { rmc show "$ID"; rmc logs "$ID" | tail -30; fail "job $ID did not succeed"; }
SHOW=$(rmc show "$ID" --json)
[ "$(jq -r '[.tasks[].node] | unique | join(",")' <<<"$SHOW")" = "$SURVIVOR" ] ||
  fail "job $ID ended on $(jq -r '[.tasks[].node] | join(",")' <<<"$SHOW"), not on $SURVIVOR alone"
[ "$(jq -r .restarts <<<"$SHOW")" -ge 1 ] || fail "job $ID never restarted"
LOGS=$(rmc logs "$ID")
RESUMED=$(grep -o "^\[0\] resuming from .*ckpt-[0-9]* (step [0-9]*" <<<"$LOGS" | tail -1)
[ -n "$RESUMED" ] || fail "the restarted gang did not resume from a checkpoint: $(tail -20 <<<"$LOGS")"
STEP=$(grep -o 'step [0-9]*' <<<"$RESUMED" | grep -o '[0-9]*')
rmc files ls "jobs/$ID/checkpoints/ckpt-$STEP/" | grep -q model.pt || fail "it resumed from ckpt-$STEP, which is not in the store"
grep -q "with checkpoint ckpt-$STEP" "$DATA/agent-$SURVIVOR.log" || fail "$SURVIVOR did not stage ckpt-$STEP"
grep -q "^\[0\] final test accuracy" <<<"$LOGS" || fail "no final accuracy"
pass "the gang restarted on $SURVIVOR, which staged ckpt-$STEP from the store; it resumed at step $STEP and succeeded"

# ---- 3. nothing on the nodes is needed any more
stop_agents
LS=$(rmc files ls "jobs/$ID/outputs/")
grep -q "predictions-test.csv" <<<"$LS" || fail "no predictions in jobs/$ID/outputs/: $LS"
rmc files get "jobs/$ID/outputs/predictions-test.csv" "$DATA/predictions.csv" > /dev/null
[ "$(wc -l < "$DATA/predictions.csv")" = 10001 ] || fail "the predictions are not 10000 rows and a header"
[ "$STEP" -lt $((8 * 469)) ] || fail "it resumed at step $STEP, after training had ended: nothing was left to resume"
LOGLS=$(rmc files ls "jobs/$ID/logs/")
grep -q "rank-0.attempt-1.log" <<<"$LOGLS" || fail "no archived log of rank 0's first attempt: $LOGLS"
LAST=$(jq -r '.tasks[] | select(.rank == 0) | .attempt' <<<"$SHOW")
for rank in 0 1; do
  rmc files cat "jobs/$ID/logs/rank-$rank.attempt-$LAST.log" | grep -q "resuming from .*ckpt-$STEP" ||
    fail "the archived log of rank $rank (attempt $LAST) does not say it resumed from ckpt-$STEP: $LOGLS"
done
pass "with both agents stopped: predictions-test.csv (10000 rows) and both ranks' logs download from jobs/$ID/"
echo "files_jobs_test: all passed"
