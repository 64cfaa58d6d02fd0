#!/usr/bin/env bash
# The main job on the embedded default: `ringmaster up` (server + local
# agent, SQLite and local files in a fresh data dir), then a 2-worker
# distributed job that trains LeNet-5 on Fashion-MNIST over ringcomm, its
# progress streamed live, its metrics, and its checkpoints, predictions and
# logs in the files service (the dataset is uploaded there first).
# Exits 0 when the job succeeded with test accuracy >= 0.85.
# Run as root, tasks run as an unprivileged uid (200000 + the user's id) that
# may not enter this checkout: the agent stages ringmaster-train for them
# (it finds it next to its binary), and the job runs in its own sandbox
# (--no-workdir) rather than in this directory.
set -euo pipefail
umask 077
RM=${1:-build/src/cli/ringmaster}
RM=$(readlink -f "$RM")
TRAIN=$(dirname "$RM")/../train/ringmaster-train
[ -x "$TRAIN" ] || { echo "demo: $TRAIN is missing: build with libtorch-dev installed (make deps)" >&2; exit 1; }
cd "$(dirname "$0")/.."

DATA=$(mktemp -d /tmp/ringmaster-demo.XXXXXX)
UP_PID=""
ID=""
cleanup() {
  local rc=$?
  set +e
  if [ -n "$UP_PID" ] && kill -0 "$UP_PID" 2>/dev/null; then
    # A stopped server leaves running tasks running: a demo cut short ends its job first.
    [ -n "$ID" ] && timeout 60 "$RM" --data "$DATA" cancel "$ID" > /dev/null 2>&1
    kill -TERM "$UP_PID" 2>/dev/null
    wait "$UP_PID" 2>/dev/null
  fi
  if [ $rc -ne 0 ] && [ -f "$DATA/up.log" ]; then
    echo "---- $DATA/up.log (last 40 lines)" >&2
    tail -n 40 "$DATA/up.log" >&2
  fi
  if [ "${DEMO_CLEANUP:-0}" = 1 ]; then
    # Jobs' network namespaces are mounts under the data dir.
    findmnt -rn -o TARGET | grep "^$DATA/" | sort -r | while read -r m; do umount -l "$m"; done
    rm -rf "$DATA"
  else
    echo "demo: its files stay in $DATA"
  fi
  exit $rc
}
trap cleanup EXIT

# Sandboxes under the data dir (the server leaves it traversable, not listable), so cleanup takes them too.
echo "==> ringmaster up --data $DATA --port 0 --sandbox-root $DATA/sandboxes"
"$RM" up --data "$DATA" --port 0 --sandbox-root "$DATA/sandboxes" > "$DATA/up.log" 2>&1 &
UP_PID=$!
for _ in $(seq 1 100); do
  [ -f "$DATA/server.json" ] && "$RM" --data "$DATA" nodes 2>/dev/null | grep -q ready && break
  kill -0 "$UP_PID" 2>/dev/null || { cat "$DATA/up.log"; echo "demo: ringmaster up exited" >&2; exit 1; }
  sleep 0.1
done
RMC=("$RM" --data "$DATA")
"${RMC[@]}" nodes

echo
echo "==> ringmaster files put /usr/share/datasets/fashion-mnist datasets/fashion-mnist"
"${RMC[@]}" files put /usr/share/datasets/fashion-mnist datasets/fashion-mnist
"${RMC[@]}" files ls datasets/fashion-mnist/

echo
echo "==> ringmaster submit --no-workdir examples/fmnist.yaml"
ID=$("${RMC[@]}" submit --no-workdir examples/fmnist.yaml)
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
echo
echo "==> ringmaster files ls jobs/$ID/ (checkpoints, outputs and logs, in the files service)"
# The server archives the ranks' logs just after the job ends.
for _ in $(seq 1 50); do "${RMC[@]}" files ls "jobs/$ID/logs/" 2>/dev/null | grep -q 'rank-1' && break; sleep 0.1; done
"${RMC[@]}" files ls "jobs/$ID/" > "$DATA/job-files.txt"
grep -v '/checkpoints/ckpt-' "$DATA/job-files.txt" || true
echo "    ($(grep -c '/checkpoints/ckpt-' "$DATA/job-files.txt") checkpoint files; latest: $("${RMC[@]}" files cat "jobs/$ID/checkpoints/latest"))"
echo
echo "==> ringmaster files get jobs/$ID/outputs/predictions-test.csv $DATA/predictions.csv"
"${RMC[@]}" files get "jobs/$ID/outputs/predictions-test.csv" "$DATA/predictions.csv"
head -4 "$DATA/predictions.csv" | sed 's/^/    /'
if ! jq -e '.accuracy >= 0.85' <<<"$METRICS" > /dev/null; then
  echo "demo: test accuracy $ACC is below 0.85" >&2
  exit 1
fi
echo "demo: job $ID succeeded"
