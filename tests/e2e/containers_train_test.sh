#!/usr/bin/env bash
# Framework images at work, under one container executor ($1: runc or docker):
#  1. the 2-worker Fashion-MNIST job (ringmaster-train, LeNet-5, ring
#     all-reduce between the two containers over the host's network) runs as
#     a `distributed` job in the torch image, reaches >= 0.85 test accuracy,
#     and its predictions are uploaded to jobs/ID/outputs/;
#  2. (runc) examples/ddp_fmnist.py, torch DDP on the `ringmaster` backend,
#     runs as a 2-worker job in the torch image;
#  3. (docker) examples/tfjs/train_predict.js trains and predicts as a
#     `train` job in the tfjs image (TensorFlow.js, wasm backend) and its
#     predictions are uploaded.
# Scripts and data reach the containers as job inputs from the files service.
source "$(dirname "$0")/lib.sh"
EXEC=${1:?usage: containers_train_test.sh runc|docker}
: "${IMAGES_DIR:?set IMAGES_DIR to the built images (tests/fixtures/images.sh)}"
IMAGE_CACHE=${IMAGE_CACHE:-$DATA/image-cache}
trap 'rc=$?; set +e; stop_agents; (exit $rc); cleanup' EXIT

case $EXEC in
  runc) PORTS=32760-32779; FLAGS=(--executors process,runc) ;;
  docker) PORTS=32780-32799; FLAGS=(--executors process,docker --docker-socket "${DOCKER_SOCK:?set DOCKER_SOCK}" --task-network host) ;;
  *) fail "unknown executor $EXEC" ;;
esac

start_server
start_agent node-a "$PORTS" "$SANDBOXES" "${FLAGS[@]}" --image-cache "$IMAGE_CACHE"
await_nodes 1
rmc images push torch --from "$IMAGES_DIR" > /dev/null 2>&1 || fail "images push torch"
rmc files put /usr/share/datasets/fashion-mnist datasets/fashion-mnist > /dev/null
pass "server, agent with $EXEC, the torch image and Fashion-MNIST in the files service"

# ---- 1. ringmaster-train, 2 workers
ID=$(jq -n --arg e "$EXEC" '{name: "fmnist-\($e)", kind: "distributed", replicas: 2, image: "torch", executor: $e,
  resources: {cpu: 1, memory: "1Gi"}, inputs: [{from: "datasets/fashion-mnist", to: "data/"}],
  command: ["ringmaster-train", "--model", "lenet5", "--epochs", "2", "--batch-size", "64", "--lr", "0.05",
            "--threads", "1", "--source", "data", "--data-dir", "data", "--predict", "test", "--progress", "none"]}' |
  rmc submit -)
rmc wait "$ID" --timeout 420 > /dev/null || { rmc show "$ID"; rmc logs "$ID" | tail -20; fail "job $ID did not succeed"; }
LOGS=$(rmc logs "$ID")
ACC=$(sed -n 's/^\[0\] final test accuracy //p' <<<"$LOGS")
[ -n "$ACC" ] || fail "no final test accuracy in: $(tail -5 <<<"$LOGS")"
awk -v a="$ACC" 'BEGIN { exit !(a >= 0.85) }' || fail "test accuracy $ACC < 0.85"
grep -q "started task .* with $EXEC (image torch@" "$DATA/agent-node-a.log" || fail "the agent did not run it with $EXEC"
OUT=$(rmc files ls "jobs/$ID/outputs/")
grep -q predictions <<<"$OUT" || fail "no predictions in jobs/$ID/outputs/: $OUT"
pass "$EXEC: 2-worker LeNet-5 in the torch image: test accuracy $ACC, predictions in jobs/$ID/outputs/"

# ---- 2. torch DDP on the ringmaster backend
if [ "$EXEC" = runc ]; then
  rmc files put "$REPO/examples/ddp_fmnist.py" users/admin/ddp_fmnist.py > /dev/null
  ID=$(jq -n '{name: "ddp-image", kind: "distributed", replicas: 2, image: "torch", executor: "runc",
    resources: {cpu: 1, memory: "2Gi"},
    inputs: [{from: "users/admin/ddp_fmnist.py", to: "ddp_fmnist.py"}, {from: "datasets/fashion-mnist", to: "data/"}],
    command: ["python3", "ddp_fmnist.py", "--backend", "ringmaster", "--epochs", "1", "--max-steps", "100",
              "--data", "data"]}' | rmc submit -)
  rmc wait "$ID" --timeout 300 > /dev/null || { rmc show "$ID"; rmc logs "$ID" | tail -20; fail "ddp job $ID did not succeed"; }
  LOGS=$(rmc logs "$ID")
  grep -q "^\[0\] ddp on ringmaster: 2 workers" <<<"$LOGS" || fail "the job did not run DDP on ringmaster: $(tail -5 <<<"$LOGS")"
  pass "runc: torch DDP (backend ringmaster, 2 workers) in the torch image: $(grep '^\[0\] final loss' <<<"$LOGS")"
fi

# ---- 3. TensorFlow.js
if [ "$EXEC" = docker ]; then
  rmc images push tfjs --from "$IMAGES_DIR" > /dev/null 2>&1 || fail "images push tfjs"
  rmc files put "$REPO/examples/tfjs/train_predict.js" users/admin/train_predict.js > /dev/null
  ID=$(jq -n '{name: "tfjs", kind: "train", image: "tfjs", executor: "docker", network: "none",
    resources: {cpu: 1, memory: "1Gi"},
    inputs: [{from: "users/admin/train_predict.js", to: "train_predict.js"}, {from: "datasets/fashion-mnist", to: "data/"}],
    command: ["node", "train_predict.js", "--data-dir", "data", "--epochs", "3"]}' | rmc submit -)
  rmc wait "$ID" --timeout 300 > /dev/null || { rmc show "$ID"; rmc logs "$ID" | tail -20; fail "tfjs job $ID did not succeed"; }
  LOGS=$(rmc logs "$ID")
  ACC=$(sed -n 's/^\[0\] test_accuracy //p' <<<"$LOGS")
  awk -v a="$ACC" 'BEGIN { exit !(a >= 0.75) }' || fail "tfjs test accuracy \"$ACC\": $(tail -5 <<<"$LOGS")"
  rmc files ls "jobs/$ID/outputs/" | grep -q predictions.csv || fail "no predictions.csv in jobs/$ID/outputs/"
  pass "docker: TensorFlow.js trained and predicted in the tfjs image: test accuracy $ACC, predictions.csv uploaded"
fi
echo "containers_train_test ($EXEC): all passed"
