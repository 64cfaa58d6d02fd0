#!/usr/bin/env bash
# Elastic scaling on measured use (issue 15, docs/monitoring.md): an elastic
# job (replicas {min: 1, max: 2}) with `autoscale: {metric: cpu,
# scale_up_above: 25, scale_down_below: 10}` over 5 s windows (low thresholds:
# other tests share these 2 cores). Its workers burn CPU while $TOOLS/load
# exists and idle otherwise; they exit 0 once $TOOLS/stop exists. The test
# switches the load on: the job's measured CPU passes 25% of what it holds and
# it grows to 2 workers; switches it off: it falls under 10% and the job
# shrinks back to 1. The events name the metric,
# its value and the threshold; the job then succeeds.
source "$(dirname "$0")/lib.sh"
# Its own port range: other e2e tests run clusters on this host at the same time.
start_up --cpus 2 --memory 4Gi --ports 32360-32379

# A worker: busy a second at a time while the load is on, else asleep; a
# resize stops it (SIGTERM) and the gang starts again at its new size.
WORKER='trap "exit 0" TERM; while [ ! -e stop ]; do
  if [ -e load ]; then end=$((SECONDS + 1)); while [ $SECONDS -lt $end ]; do :; done; else sleep 0.2; fi
done'
ID=$(jq -n --arg w "$WORKER" '{name: "autoscale", kind: "distributed", replicas: {min: 1, max: 2},
  resources: {cpu: 1, memory: "64Mi"}, command: ["bash", "-c", $w],
  autoscale: {metric: "cpu", scale_up_above: 25, scale_down_below: 10, window: "5s", cooldown: "5s"}}' | rmc submit -)
wait_state "$ID" RUNNING 30
[ "$(job_field "$ID" replicas)" = 1 ] || fail "the job started with $(job_field "$ID" replicas) workers, not 1"
# Idle, it does not grow (no cluster threshold for a job that scales on measured use).
sleep 8
[ "$(job_field "$ID" replicas)" = 1 ] || { rmc show "$ID"; fail "an idle autoscaled job grew"; }
pass "job $ID runs 1 idle worker and stays at 1"

# await_size N: waits (a hang guard, 30 s) until the job runs with N workers.
await_size() {
  for _ in $(seq 1 300); do
    [ "$(job_field "$ID" replicas)" = "$1" ] && [ "$(job_field "$ID" state)" = RUNNING ] && return 0
    sleep 0.1
  done
  return 1
}
touch load
await_size 2 || { rmc show "$ID"; fail "the loaded job did not grow to 2 workers in 30 s"; }
UP=$(rmc show "$ID" --json | jq -r '[.events[].reason | select(startswith("scale up 1\u21922: cpu "))][0] // ""')
[[ "$UP" =~ ^scale\ up\ 1→2:\ cpu\ ([0-9]+)%\ \>\ 25%\ over\ 5s ]] || { rmc show "$ID"; fail "no scale-up event naming cpu and 25%: '$UP'"; }
[ "${BASH_REMATCH[1]}" -gt 25 ] || fail "scaled up at cpu ${BASH_REMATCH[1]}%, not above 25%"
pass "under load it grew to 2 workers: $UP"

# The usage API shows what the decision read: each task's CPU in cores. A
# restarted rank's first CPU point needs two cgroup readings and a heartbeat
# to carry them, seconds on a loaded machine: poll (a hang guard, 30 s).
wait_state "$ID" RUNNING 30
usage() { curl -sf -H "Authorization: Bearer $(cat "$DATA/admin.token")" "$(jq -r .url "$DATA/server.json")/api/v1/jobs/$ID/usage?since=30"; }
two_running() { [ "$(jq '[.tasks[] | select(.state == "RUNNING")] | length' <<<"$USAGE")" = 2 ]; }
both_loaded() {
  jq -e '[.tasks[] | select(.state == "RUNNING") | (.series.cpu_cores // []) | map(.[2]) | max // 0] | all(. > 0.1)' \
    <<<"$USAGE" > /dev/null
}
for _ in $(seq 1 60); do
  USAGE=$(usage) || true  # a refused read is retried like an early one
  two_running && both_loaded && break
  sleep 0.5
done
two_running || fail "usage lists no 2 running tasks: $USAGE"
both_loaded || fail "the running tasks' cpu_cores series do not show the load in 30 s: $USAGE"
pass "GET /api/v1/jobs/$ID/usage shows both workers' CPU"

rm -f load
await_size 1 || { rmc show "$ID"; fail "the idle job did not shrink back to 1 worker in 30 s"; }
DOWN=$(rmc show "$ID" --json | jq -r '[.events[].reason | select(startswith("scale down 2\u21921: cpu "))][0] // ""')
[[ "$DOWN" =~ ^scale\ down\ 2→1:\ cpu\ ([0-9]+)%\ \<\ 10%\ over\ 5s ]] || { rmc show "$ID"; fail "no scale-down event naming cpu and 10%: '$DOWN'"; }
pass "without load it shrank to 1 worker: $DOWN"

touch stop
rmc wait "$ID" --timeout 60 > /dev/null || { rmc show "$ID"; fail "job $ID did not succeed"; }
[ "$(job_field "$ID" restarts)" = 0 ] || fail "resizes counted as restarts"
pass "job $ID succeeded"
echo "autoscale_test: all passed"
