#!/usr/bin/env bash
# Ringmaster on Slurm (`ringmaster up --backend slurm`) over the tests' Slurm
# (tests/fixtures/slurm.sh: slurmctld and two slurmd, n1 with one fake GPU, n2
# with two, as GRES on mknod'ed devices):
#  1. the 2-worker Fashion-MNIST job with `gpu: 1` per task runs as one Slurm
#     job on the fake GPUs and succeeds; its log is live in `logs -f` while it
#     runs; its predictions are in jobs/ID/outputs/;
#  2. while a blocker holds every GPU, `show` prints Slurm's pending reason in
#     words; `cancel` of the waiting job leaves squeue without it;
#  3. `scontrol update nodename=N state=down` under a running gang requeues it
#     (not counted as a restart) and it resumes from its checkpoint.
source "$(dirname "$0")/lib.sh"
: "${RM_SLURM_DIR:?set RM_SLURM_DIR to the Slurm fixture (tests/fixtures/slurm.sh up DIR)}"
source "$RM_SLURM_DIR/slurm.env"
chmod 0711 "$DATA"  # task users traverse it to their work dirs under $DATA/steps
DOWNED=""
# A downed node comes back (ReturnToService=2 may have brought it back already: then resume is refused).
resume() { scontrol update nodename="$1" state=resume 2>/dev/null || true; }
trap 'rc=$?; set +e; [ -n "$DOWNED" ] && resume "$DOWNED"; [ ${#SEEN[@]} -gt 0 ] && scancel "${SEEN[@]}" 2>/dev/null; (exit $rc); cleanup' EXIT

"$RM" up --data "$DATA" --port 0 --backend slurm --slurm-output "$DATA/slurm-%j.out" \
  --slurm-step-dir "$DATA/steps" --slurm-sandbox-root "$SANDBOXES" >> "$DATA/up.log" 2>&1 &
UP_PID=$!
for _ in $(seq 1 200); do
  [ -f "$DATA/server.json" ] && rmc nodes 2>/dev/null | grep -q '^n2 ' && break
  kill -0 "$UP_PID" 2>/dev/null || { cat "$DATA/up.log"; fail "ringmaster up --backend slurm exited"; }
  sleep 0.1
done
NODES=$(rmc nodes)
grep -q '^n1 .* gpu' <<<"$NODES" && grep -q '^n2 .* gpu' <<<"$NODES" || fail "Slurm's nodes with their GRES expected: $NODES"
pass "ringmaster nodes shows Slurm's nodes: $(awk 'NR > 1 {printf "%s %s %s; ", $1, $2, $5}' <<<"$NODES")"

# slurm_id ID: the Slurm job of job ID's latest attempt, as `show` says ("" before it has one);
# remembered, so that the test's Slurm jobs are cancelled when it ends whatever happens.
SEEN=()
slurm_id() {
  local id
  id=$(rmc show "$1" | grep -o "Slurm[' a-z]* as job [0-9]*" | tail -1 | grep -o '[0-9]*$' || true)
  [ -n "$id" ] && SEEN+=("$id")
  echo "$id"
}
# squeue_state SLURM_ID: its state while Slurm's queue lists it (pending, running, completing), else "".
squeue_state() { [ -n "$1" ] && squeue -h -j "$1" -t PD,R,CG,S -o %T 2>/dev/null | head -1 || true; }
# await_state ID STATE [SECONDS]
await_state() {
  for _ in $(seq 1 $((${3:-120} * 5))); do
    [ "$(rmc show "$1" --json | jq -r .state)" = "$2" ] && return 0
    sleep 0.2
  done
  rmc show "$1"
  fail "job $1 did not reach $2"
}

rmc files put /usr/share/datasets/fashion-mnist datasets/fashion-mnist > /dev/null
# train ARGS...: the job's command; each rank first says which GPUs Slurm gave it.
train_cmd() {
  printf '%s\n' --model lenet5 --threads 1 --source data --data-dir data --progress none "$@" | jq -R . |
    jq -sc '["sh", "-c", "echo rank $RANK CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; cd \"$RINGMASTER_WORK_DIR\" && exec ringmaster-train \"$@\"", "train"] + .'
}

# ---- 1. the 2-worker Fashion-MNIST job, gpu: 1 per task
CMD=$(train_cmd --epochs 1 --batch-size 64 --lr 0.05 --predict test)
ID=$(jq -n --argjson cmd "$CMD" '{name: "fmnist-slurm", kind: "distributed", replicas: 2,
  resources: {cpu: 1, memory: "1Gi", gpu: 1}, inputs: [{from: "datasets/fashion-mnist", to: "data/"}],
  command: $cmd}' | rmc submit -)
rmc logs -f "$ID" > "$DATA/follow.log" 2>&1 &
FOLLOW=$!
await_state "$ID" RUNNING 120
SID=$(slurm_id "$ID")
[ "$(squeue_state "$SID")" = RUNNING ] || fail "job $ID is not running in Slurm (job ${SID:-?}): $(squeue -h -o '%i %j %T %R')"
# Live: the follower has lines while the job still runs.
for _ in $(seq 1 300); do grep -q 'CUDA_VISIBLE_DEVICES' "$DATA/follow.log" && break; sleep 0.2; done
[ "$(rmc show "$ID" --json | jq -r .state)" = RUNNING ] || fail "job $ID ended before its log was followed"
grep -q 'CUDA_VISIBLE_DEVICES' "$DATA/follow.log" || fail "logs -f showed nothing while job $ID ran"
pass "job $ID runs as Slurm job $SID ($(squeue -h -j "$SID" -o %j)) on $(squeue -h -j "$SID" -o %N); logs -f is live"
rmc wait "$ID" --timeout 600 > /dev/null || { rmc show "$ID"; tail -20 "$DATA"/slurm-*.out; fail "job $ID did not succeed"; }
wait "$FOLLOW" || true
LOGS=$(rmc logs "$ID")
for r in 0 1; do
  grep -Eq "^\[$r\] rank $r CUDA_VISIBLE_DEVICES=[0-9]" <<<"$LOGS" || fail "rank $r got no GPU from Slurm: $(grep CUDA <<<"$LOGS")"
done
grep -q 'test accuracy' "$DATA/follow.log" || fail "logs -f did not follow to the end: $(tail -3 "$DATA/follow.log")"
OUT=$(rmc files ls "jobs/$ID/outputs/")
grep -q predictions <<<"$OUT" || fail "no predictions in jobs/$ID/outputs/: $OUT"
pass "2-worker Fashion-MNIST on Slurm with a fake GPU each: $(grep -o 'CUDA_VISIBLE_DEVICES=[0-9,]*' <<<"$LOGS" | tr '\n' ' ')predictions in jobs/$ID/outputs/"

# ---- 2. Slurm's pending reason in words; cancel leaves squeue without the job
BLOCK=$(jq -n '{name: "blocker", kind: "distributed", replicas: 3, resources: {cpu: 1, memory: "256Mi", gpu: 1},
  command: ["sleep", "600"]}' | rmc submit -)
await_state "$BLOCK" RUNNING 60
WAITER=$(jq -n '{name: "waiter", kind: "train", resources: {cpu: 1, memory: "256Mi", gpu: 1},
  command: ["true"]}' | rmc submit -)
for _ in $(seq 1 150); do rmc show "$WAITER" | grep -q "waiting in Slurm's queue as job" && break; sleep 0.2; done
SHOW=$(rmc show "$WAITER")
REASON=$(grep -o "waiting in Slurm's queue as job [0-9]*: .*" <<<"$SHOW" | head -1)
[ -n "$REASON" ] || fail "show does not say why job $WAITER waits in Slurm: $SHOW"
WID=$(slurm_id "$WAITER")
CODE=$(squeue -h -j "$WID" -o %r)
[ -n "$CODE" ] && ! grep -qx ".*: $CODE" <<<"$REASON" || fail "the reason is Slurm's code, not words: $REASON"
pass "while the blocker holds the GPUs, show says: $REASON (Slurm: $CODE)"
rmc cancel "$WAITER" > /dev/null
for _ in $(seq 1 100); do [ -z "$(squeue_state "$WID")" ] && break; sleep 0.1; done
[ -z "$(squeue_state "$WID")" ] || fail "squeue still lists Slurm job $WID after cancel: $(squeue_state "$WID")"
await_state "$WAITER" CANCELLED 30
pass "cancel of job $WAITER: squeue no longer lists it; it is CANCELLED"
rmc cancel "$BLOCK" > /dev/null
await_state "$BLOCK" CANCELLED 60

# ---- 3. a node goes down under a running gang: requeued, resumes from its checkpoint
CMD=$(train_cmd --epochs 1 --max-steps 600 --batch-size 64 --lr 0.05 --checkpoint-every 50)
ID=$(jq -n --argjson cmd "$CMD" '{name: "fmnist-nodefail", kind: "distributed", replicas: 2, max_restarts: 0,
  resources: {cpu: 1, memory: "1Gi"}, inputs: [{from: "datasets/fashion-mnist", to: "data/"}],
  command: $cmd}' | rmc submit -)
await_state "$ID" RUNNING 120
for _ in $(seq 1 600); do rmc files ls "jobs/$ID/checkpoints/" 2>/dev/null | grep -q latest && break; sleep 0.2; done
rmc files ls "jobs/$ID/checkpoints/" | grep -q latest || fail "job $ID wrote no checkpoint"
SID=$(slurm_id "$ID")
WHERE=$(squeue -h -j "$SID" -o %N)
DOWNED=$(scontrol show hostnames "$WHERE" | head -1)
scontrol update nodename="$DOWNED" state=down reason="e2e: node failure"
pass "job $ID checkpointed; $DOWNED (of $WHERE) is down"
SID2=""
for _ in $(seq 1 300); do
  SID2=$(slurm_id "$ID")
  [ "$SID2" != "$SID" ] && [ "$(squeue_state "$SID2")" = RUNNING ] && break
  sleep 0.2
done
[ "$SID2" != "$SID" ] && [ "$(squeue_state "$SID2")" = RUNNING ] || { rmc show "$ID"; fail "job $ID was not requeued into a new Slurm job"; }
resume "$DOWNED"
DOWNED=""
rmc wait "$ID" --timeout 600 > /dev/null || { rmc show "$ID"; fail "job $ID did not succeed after the requeue"; }
rmc show "$ID" | grep -q "lost a node" || fail "the job's events do not say a node was lost: $(rmc show "$ID")"
[ "$(rmc show "$ID" --json | jq .restarts)" = 0 ] || fail "a node failure counted as a restart"
rmc logs "$ID" | grep -q "resuming from .*ckpt-" || fail "job $ID did not resume from its checkpoint: $(rmc logs "$ID" | grep -i resum)"
pass "after the node failure job $ID ran again as Slurm job $SID2 and resumed from its checkpoint at $(rmc logs "$ID" | grep -o 'resuming from [^ ]* (step [0-9]*' | head -1 | grep -o 'step [0-9]*')"
echo "slurm_test: all passed"
