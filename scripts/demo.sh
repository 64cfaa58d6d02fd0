#!/usr/bin/env bash
# The main job on the embedded default: `ringmaster up` (server + local
# agent, SQLite and local files in a fresh data dir), then a 2-worker
# distributed job that trains LeNet-5 on Fashion-MNIST over ringcomm, its
# progress streamed live, its metrics, checkpoint and predictions.
# Exits 0 when the job succeeded with test accuracy >= 0.85.
set -euo pipefail
RM=${1:-build/src/cli/ringmaster}
RM=$(readlink -f "$RM")
TRAIN=${2:-$(dirname "$RM")/../train/ringmaster-train}
TRAIN=$(readlink -f "$TRAIN")
[ -x "$TRAIN" ] || { echo "demo: $TRAIN is missing: build with libtorch-dev installed (make deps)" >&2; exit 1; }
cd "$(dirname "$0")/.."
# Tasks find ringmaster-train on the agent's PATH.
export PATH="$(dirname "$TRAIN"):$PATH"

DATA=$(mktemp -d /tmp/ringmaster-demo.XXXXXX)
UP_PID=""
cleanup() {
  if [ -n "$UP_PID" ] && kill -0 "$UP_PID" 2>/dev/null; then
    kill -TERM "$UP_PID" 2>/dev/null || true
    wait "$UP_PID" 2>/dev/null || true
  fi
  if [ "${DEMO_CLEANUP:-0}" = 1 ]; then rm -rf "$DATA"; else echo "demo: its files stay in $DATA"; fi
}
trap cleanup EXIT

echo "==> ringmaster up --data $DATA --port 0"
"$RM" up --data "$DATA" --port 0 > "$DATA/up.log" 2>&1 &
UP_PID=$!
for _ in $(seq 1 100); do
  [ -f "$DATA/server.json" ] && "$RM" --data "$DATA" nodes 2>/dev/null | grep -q ready && break
  kill -0 "$UP_PID" 2>/dev/null || { cat "$DATA/up.log"; echo "demo: ringmaster up exited" >&2; exit 1; }
  sleep 0.1
done
RMC=("$RM" --data "$DATA")
"${RMC[@]}" nodes

echo
echo "==> ringmaster submit examples/fmnist.yaml"
ID=$("${RMC[@]}" submit examples/fmnist.yaml)
echo "job $ID submitted"

echo
echo "==> ringmaster logs -f $ID"
"${RMC[@]}" logs -f "$ID"

echo
echo "==> ringmaster wait $ID"
"${RMC[@]}" wait "$ID"
echo
"${RMC[@]}" show "$ID"
echo
METRICS=$("${RMC[@]}" show "$ID" --json | jq -c .metrics)
ACC=$(jq -r .accuracy <<<"$METRICS")
echo "final test accuracy: $ACC (2 workers)"
echo "checkpoint:          $(jq -r .checkpoint <<<"$METRICS")"
echo "predictions:         $(jq -r .predictions <<<"$METRICS")"
head -4 "$(jq -r .predictions <<<"$METRICS")" | sed 's/^/    /'
if ! jq -e '.accuracy >= 0.85' <<<"$METRICS" > /dev/null; then
  echo "demo: test accuracy $ACC is below 0.85" >&2
  exit 1
fi
echo "demo: job $ID succeeded"
