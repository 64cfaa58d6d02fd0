#!/usr/bin/env bash
# Parameter-server jobs with roles (docs/jobspec.md, "Roles"), each in its
# framework's image under runc on one agent, training Fashion-MNIST from job
# inputs ($1 picks one):
#   mxnet   examples/mxnet/fmnist_gluon.py on kvstore dist_sync with
#           replicas {scheduler: 1, server: 1, worker: 2}; after the first
#           checkpoint reaches the files service the server task's process is
#           killed with SIGKILL: the gang restarts, both workers resume from the
#           checkpoint, and the job succeeds with >= 0.85 test accuracy;
#   tf-ps   examples/tf/fmnist_keras.py --strategy ps with
#           replicas {chief: 1, ps: 1, worker: 2}: the chief coordinates and
#           reaches >= 0.85, and the ps and worker tasks are stopped when it
#           succeeds.
# Either way the predictions land in jobs/ID/outputs/.
source "$(dirname "$0")/lib.sh"
MODE=${1:?usage: roles_train_test.sh mxnet|tf-ps}
: "${IMAGES_DIR:?set IMAGES_DIR to the built images (tests/fixtures/images.sh)}"
IMAGE_CACHE=${IMAGE_CACHE:-$DATA/image-cache}
trap 'rc=$?; set +e; stop_agents; (exit $rc); cleanup' EXIT
case $MODE in
  mxnet) PORTS=33100-33119 IMAGE=mxnet SCRIPT=examples/mxnet/fmnist_gluon.py
         REPLICAS='{"scheduler": 1, "server": 1, "worker": 2}' ARGS='["--epochs", "3"]' ;;
  tf-ps) PORTS=33120-33139 IMAGE=tensorflow SCRIPT=examples/tf/fmnist_keras.py
         REPLICAS='{"chief": 1, "ps": 1, "worker": 2}' ARGS='["--strategy", "ps", "--epochs", "4"]' ;;
  *) fail "unknown mode $MODE" ;;
esac

start_server
start_agent node-a "$PORTS" "$SANDBOXES" --executors process,runc --image-cache "$IMAGE_CACHE"
await_nodes 1
rmc images push "$IMAGE" --from "$IMAGES_DIR" > /dev/null 2>&1 || fail "images push $IMAGE"
rmc files put /usr/share/datasets/fashion-mnist datasets/fashion-mnist > /dev/null
PROG=$(basename "$SCRIPT")
rmc files put "$REPO/$SCRIPT" "users/admin/$PROG" > /dev/null
pass "server, agent with runc, the $IMAGE image, Fashion-MNIST and $PROG in the files service"

# Four tasks on the agent's 2 CPUs.
ID=$(jq -n --arg img "$IMAGE" --arg prog "$PROG" --argjson replicas "$REPLICAS" --argjson args "$ARGS" \
  '{name: "roles-\($img)", kind: "distributed", replicas: $replicas, image: $img, executor: "runc", max_restarts: 2,
    resources: {cpu: 0.5, memory: "768Mi"}, env: {OMP_NUM_THREADS: "1"}, outputs: ["outputs/"],
    inputs: [{from: "users/admin/\($prog)", to: $prog}, {from: "datasets/fashion-mnist", to: "data/"}],
    command: (["python3", $prog, "--data", "data"] + $args)}' | rmc submit -)
ROLES=$(jq -c . <<<"$REPLICAS")

if [ "$MODE" = mxnet ]; then
  for _ in $(seq 1 1800); do [ -n "$(latest_checkpoint "$ID")" ] && break; sleep 0.1; done
  CKPT=$(latest_checkpoint "$ID")
  [ -n "$CKPT" ] || { rmc logs "$ID" | tail -20; fail "job $ID uploaded no checkpoint in 180s"; }
  KEY=$(task_key "$ID" 1)  # rank 1: the server (ranks go scheduler, server, worker)
  PID=$(cat "$DATA/agent-node-a/tasks/$KEY/task.pid")
  kill -KILL "$PID"
  pass "mxnet: the server task ($KEY) killed with SIGKILL after $CKPT"
fi

rmc wait "$ID" --timeout 480 > /dev/null || { rmc show "$ID"; rmc logs "$ID" | tail -30; fail "job $ID did not succeed"; }
SHOW=$(rmc show "$ID" --json)
LOGS=$(rmc logs "$ID")
ACC=$(sed -n 's/^\[[0-9]*\] test accuracy: //p' <<<"$LOGS" | tail -1)
[ -n "$ACC" ] || fail "no test accuracy in: $(tail -5 <<<"$LOGS")"
awk -v a="$ACC" 'BEGIN { exit !(a >= 0.85) }' || fail "test accuracy $ACC < 0.85"
grep -q "started task .* with runc (image $IMAGE@" "$DATA/agent-node-a.log" || fail "the agent did not run it with runc"
rmc files ls "jobs/$ID/outputs/" | grep -q predictions.csv || fail "no predictions.csv in jobs/$ID/outputs/"

if [ "$MODE" = mxnet ]; then
  [ "$(jq -r .restarts <<<"$SHOW")" -ge 1 ] || fail "job $ID did not restart after its server was killed"
  RESUMED=$(grep -c "^\[[0-9]*\] resumed from checkpoint: epoch [1-9]" <<<"$LOGS" || true)
  [ "$RESUMED" -ge 2 ] || fail "both workers should resume from a checkpoint: $(grep -i resumed <<<"$LOGS")"
  pass "mxnet dist_sync ($ROLES): restarted $(jq -r .restarts <<<"$SHOW") time(s) after the server died," \
    "$(grep -m1 -o 'resumed from checkpoint: epoch [0-9]*' <<<"$LOGS"); test accuracy $ACC, predictions uploaded"
else
  grep -q "^\[0\] ps: chief, 1 ps, 2 workers" <<<"$LOGS" || fail "rank 0 did not coordinate: $(head -5 <<<"$LOGS")"
  grep -q "^\[1\] ps 0: serving" <<<"$LOGS" || fail "rank 1 did not serve as ps 0"
  jq -e '[.tasks[] | select(.rank != 0) | .state] | all(. == "CANCELLED")' <<<"$SHOW" > /dev/null ||
    fail "the ps and workers were not stopped after the chief: $(jq -c '[.tasks[] | {rank, role, state}]' <<<"$SHOW")"
  pass "tf ParameterServerStrategy ($ROLES): test accuracy $ACC, predictions uploaded, ps and workers stopped"
fi
echo "roles_train_test ($MODE): all passed"
