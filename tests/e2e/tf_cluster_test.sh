#!/usr/bin/env bash
# TensorFlow MultiWorkerMirroredStrategy across a real multi-host cluster
# (scripts/cluster/up.sh: 3 hosts, the vxlan overlay, the tensorflow image
# under runc; examples/tf/fmnist_keras.py and Fashion-MNIST as job inputs):
#  1. a 3-worker job (`replicas: 3`, one worker per host by its CPUs) gets
#     TF_CONFIG with the workers' overlay addresses, all-reduces across the
#     hosts, reaches >= 0.85 test accuracy, and worker 0's predictions are
#     uploaded to jobs/ID/outputs/;
#  2. a second such job: once its first checkpoint is in the files service,
#     the agent of a worker's host (not the server's) is killed with SIGKILL.
#     Its task runs on unattended, but once the node has been silent for the
#     fencing window (10 s here, --node-lost-after) and a lease more, the
#     server marks it LOST and restarts the gang. The gang needs all three
#     hosts, so the agent is started again (as after a host's reboot): it
#     stops the stale attempt it finds, and the new attempt's workers each
#     restore the staged checkpoint (BackupAndRestore), print the resume line,
#     and finish with >= 0.85.
# Between the two, MXNet's dist_sync (scheduler, server, 2 workers) trains
# across the hosts over the same overlay, to >= 0.85.
source "$(dirname "$0")/lib.sh"
source "$REPO/scripts/cluster/procs.sh"
: "${IMAGES_DIR:?set IMAGES_DIR to the built images (tests/fixtures/images.sh)}"
CLUSTER=$DATA/cluster
NAME=ctf
chmod 0711 "$DATA"  # task users traverse it to their sandboxes
down() { [ -f "$CLUSTER/name" ] && bash "$REPO/scripts/cluster/down.sh" --state "$CLUSTER"; }
trap 'rc=$?; set +e; down > /dev/null 2>&1; (exit $rc); cleanup' EXIT

IMAGE_CACHE=${IMAGE_CACHE:-$DATA/image-cache}
bash "$REPO/scripts/cluster/up.sh" 3 --network vxlan --name "$NAME" --state "$CLUSTER" --bin "$RM" \
  --image-cache "$IMAGE_CACHE" --agent-flags "--cpus 2 --memory 6Gi" --server-flags "--node-lost-after 10" \
  > "$DATA/up.out" 2>&1 || { cat "$DATA/up.out"; fail "up.sh 3 --network vxlan"; }
crm() { "$CLUSTER/rm" "$@"; }
cfield() { crm show "$1" --json | jq -r ".$2"; }
clatest() { crm files cat "jobs/$1/checkpoints/latest" 2>/dev/null | tr -d '\n' || true; }
crm images push tensorflow --from "$IMAGES_DIR" > /dev/null 2>&1 || fail "images push tensorflow"
crm files put /usr/share/datasets/fashion-mnist datasets/fashion-mnist > /dev/null
crm files put "$REPO/examples/tf/fmnist_keras.py" users/admin/fmnist_keras.py > /dev/null
pass "3 hosts on vxlan, the tensorflow image, Fashion-MNIST and fmnist_keras.py in the files service"

# spec NAME EPOCHS: cpu 2 of each host's 2, so one worker per host.
spec() {
  jq -n --arg name "$1" --arg epochs "$2" '{name: $name, kind: "distributed", replicas: 3, image: "tensorflow",
    max_restarts: 2, resources: {cpu: 2, memory: "2Gi"}, outputs: ["outputs/"],
    inputs: [{from: "users/admin/fmnist_keras.py", to: "fmnist_keras.py"}, {from: "datasets/fashion-mnist", to: "data/"}],
    command: ["python3", "fmnist_keras.py", "--strategy", "mwms", "--epochs", $epochs, "--data", "data"]}'
}
# check_result ID: prints the test accuracy after checking it and the predictions.
check_result() {
  local logs acc
  logs=$(crm logs "$1")
  acc=$(sed -n 's/^\[0\] test accuracy: //p' <<<"$logs")
  [ -n "$acc" ] || fail "job $1: no test accuracy in: $(grep -v 'I0000\|WARNING' <<<"$logs" | tail -5)"
  awk -v a="$acc" 'BEGIN { exit !(a >= 0.85) }' || fail "job $1: test accuracy $acc < 0.85"
  crm files ls "jobs/$1/outputs/" | grep -q predictions.csv || fail "no predictions.csv in jobs/$1/outputs/"
  echo "$acc"
}

# ---- 1. three workers on three hosts
ID=$(crm submit - <<<"$(spec tf-mwms 3)")
crm wait "$ID" --timeout 480 > /dev/null ||
  { crm show "$ID"; crm logs "$ID" | grep -v 'I0000' | tail -20; fail "job $ID did not succeed"; }
SHOW=$(crm show "$ID" --json)
[ "$(jq -r '[.tasks[].node] | unique | length' <<<"$SHOW")" = 3 ] ||
  fail "the workers did not land one per host: $(jq -c '[.tasks[].node]' <<<"$SHOW")"
ADDRS=$(jq -r '[.tasks[] | "\(.node)=\(.overlay_address)"] | join(" ")' <<<"$SHOW")
jq -e '[.tasks[] | .overlay_address | test("^10\\.244\\.[0-9]+\\.[0-9]+$")] | all' <<<"$SHOW" > /dev/null ||
  fail "workers without overlay addresses: $ADDRS"
grep -q "^\[0\] mwms: 3 workers" <<<"$(crm logs "$ID")" || fail "worker 0 did not train with 3 workers"
ACC=$(check_result "$ID")
pass "MultiWorkerMirroredStrategy, 3 workers on 3 hosts ($ADDRS): test accuracy $ACC, predictions uploaded"

# ---- 1b. MXNet's parameter server across the hosts: {scheduler: 1, server: 1,
# worker: 2} at one CPU each (two tasks a host), ps-lite over the overlay
# (DMLC_NODE_HOST: each task's overlay address).
crm images push mxnet --from "$IMAGES_DIR" > /dev/null 2>&1 || fail "images push mxnet"
crm files put "$REPO/examples/mxnet/fmnist_gluon.py" users/admin/fmnist_gluon.py > /dev/null
ID=$(jq -n '{name: "mx-cluster", kind: "distributed", replicas: {scheduler: 1, server: 1, worker: 2}, image: "mxnet",
    max_restarts: 1, resources: {cpu: 1, memory: "1Gi"}, env: {OMP_NUM_THREADS: "1"}, outputs: ["outputs/"],
    inputs: [{from: "users/admin/fmnist_gluon.py", to: "fmnist_gluon.py"}, {from: "datasets/fashion-mnist", to: "data/"}],
    command: ["python3", "fmnist_gluon.py", "--epochs", "3", "--data", "data"]}' | crm submit -)
crm wait "$ID" --timeout 480 > /dev/null || { crm show "$ID"; crm logs "$ID" | tail -20; fail "mxnet job $ID did not succeed"; }
SHOW=$(crm show "$ID" --json)
HOSTS=$(jq -r '[.tasks[].node] | unique | length' <<<"$SHOW")
[ "$HOSTS" -ge 2 ] || fail "the mxnet tasks did not spread over the hosts: $(jq -c '[.tasks[].node]' <<<"$SHOW")"
ACC=$(crm logs "$ID" | sed -n 's/^\[[0-9]*\] test accuracy: //p' | tail -1)
[ -n "$ACC" ] && awk -v a="$ACC" 'BEGIN { exit !(a >= 0.85) }' || fail "mxnet job $ID: test accuracy '$ACC' (want >= 0.85)"
pass "MXNet dist_sync, scheduler + server + 2 workers on $HOSTS hosts over the overlay: test accuracy $ACC"

# ---- 2. a worker's agent is killed mid-training
ID=$(crm submit - <<<"$(spec tf-mwms-fault 5)")
for _ in $(seq 1 1500); do [ -n "$(clatest "$ID")" ] && break; sleep 0.2; done
CKPT=$(clatest "$ID")
[ -n "$CKPT" ] || { crm logs "$ID" | grep -v 'I0000' | tail -20; fail "job $ID uploaded no checkpoint in 300s"; }
HOST=$(crm show "$ID" --json | jq -r '[.tasks[].node | select(. != "h1")] | first')
read -r _ APID ASTART < <(grep "^agent-$HOST " "$CLUSTER/pids")
proc_running "$APID" "$ASTART" || fail "$HOST's agent (pid $APID) is not running"
mapfile -d '' -t AGENT_CMD < "/proc/$APID/cmdline"
kill -KILL "$APID"
pass "job $ID: $HOST's agent killed with SIGKILL after $CKPT"

for _ in $(seq 1 450); do [ "$(cfield "$ID" restarts)" -ge 1 ] && break; sleep 0.2; done
SHOW=$(crm show "$ID" --json)
[ "$(jq -r .restarts <<<"$SHOW")" -ge 1 ] || { crm show "$ID"; fail "job $ID did not restart within 90s of $HOST's agent dying"; }
jq -e --arg n "$HOST" '[.events[] | select(.to == "LOST" and (.reason | startswith("node \($n) lost")))] | length >= 1' \
  <<<"$SHOW" > /dev/null || { crm show "$ID"; fail "no LOST event naming $HOST"; }
nsenter --net="/run/netns/$NAME-$HOST" -- "${AGENT_CMD[@]}" >> "$CLUSTER/$HOST/agent.log" 2>&1 &
echo "agent-$HOST $! $(proc_start $!)" >> "$CLUSTER/pids"
pass "$HOST lost, the gang restarted; $HOST's agent started again"

crm wait "$ID" --timeout 480 > /dev/null ||
  { crm show "$ID"; crm logs "$ID" | grep -v 'I0000' | tail -30; fail "job $ID did not succeed after the restart"; }
LOGS=$(crm logs "$ID")
RESUMED=$(grep -c "^\[[0-9]\] resumed from checkpoint: epoch [1-9]" <<<"$LOGS" || true)
[ "$RESUMED" -ge 3 ] || fail "every worker should resume from the checkpoint: $(grep -i resumed <<<"$LOGS")"
ACC=$(check_result "$ID")
pass "all 3 workers $(grep -m1 -o 'resumed from checkpoint: epoch [0-9]*' <<<"$LOGS"); test accuracy $ACC, predictions uploaded"
echo "tf_cluster_test: all passed"
