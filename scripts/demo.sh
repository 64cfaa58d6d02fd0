#!/usr/bin/env bash
# The main job on the embedded default: `ringmaster up` (server + local
# agent, SQLite and local files in a fresh data dir), a 2-replica job,
# its logs streamed live, and its final state. Exits 0 when the job succeeded.
set -euo pipefail
RM=${1:-build/src/cli/ringmaster}
RM=$(readlink -f "$RM")
cd "$(dirname "$0")/.."

DATA=$(mktemp -d /tmp/ringmaster-demo.XXXXXX)
UP_PID=""
cleanup() {
  if [ -n "$UP_PID" ] && kill -0 "$UP_PID" 2>/dev/null; then
    kill -TERM "$UP_PID" 2>/dev/null || true
    wait "$UP_PID" 2>/dev/null || true
  fi
  rm -rf "$DATA"
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
echo "==> ringmaster submit examples/hello.yaml"
ID=$("${RMC[@]}" submit examples/hello.yaml)
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
echo "demo: job $ID succeeded"
