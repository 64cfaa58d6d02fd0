#!/usr/bin/env bash
# A real Prometheus (Debian's /usr/bin/prometheus) scraping `ringmaster up`'s
# /metrics every second with an admin token from a file (the scrape config of
# docs/monitoring.md): the node's CPU, the running job and the target's `up`
# reach Prometheus' query API, and a range query holds several points. Also:
# /metrics answers 401 without a token and 403 to a user who is not an admin,
# and its text passes Prometheus' own parser and linter (promtool).
source "$(dirname "$0")/lib.sh"
PROM_PID=""
stop_prometheus() {
  if [ -n "$PROM_PID" ] && kill -0 "$PROM_PID" 2>/dev/null; then
    kill -TERM "$PROM_PID"
    for _ in $(seq 1 100); do kill -0 "$PROM_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$PROM_PID" 2>/dev/null && kill -KILL "$PROM_PID"
    wait "$PROM_PID" 2>/dev/null || true
  fi
  PROM_PID=""
  return 0
}
trap 'rc=$?; set +e; stop_prometheus; [ $rc -ne 0 ] && [ -f "$DATA/prometheus.log" ] && tail -n 20 "$DATA/prometheus.log" >&2; (exit $rc); cleanup' EXIT

command -v prometheus > /dev/null && command -v promtool > /dev/null ||
  fail "prometheus and promtool are not installed (Debian package prometheus; scripts/install-deps.sh)"

start_up --cpus 2
URL=$(jq -r .url "$DATA/server.json")
NODE=$(rmc nodes --json | jq -r '.nodes[0].name')
[ -n "$NODE" ] && [ "$NODE" != null ] || fail "no node name in: $(rmc nodes --json)"
CURL=(curl -s)
[[ "$URL" == https://* ]] && CURL+=(--cacert "$DATA/tls/ca.crt")

# 1. /metrics: 401 without a token, 403 for a user who is not an admin; a
# metrics-scoped token (it reaches nothing else) gets text Prometheus' parser
# and linter accept.
CODE=$("${CURL[@]}" -o /dev/null -w '%{http_code}' "$URL/metrics")
[ "$CODE" = 401 ] || fail "GET /metrics without a token answered $CODE, not 401"
rmc users create alice > /dev/null 2>&1
ALICE=$(rmc tokens create --user alice)
CODE=$("${CURL[@]}" -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $ALICE" "$URL/metrics")
[ "$CODE" = 403 ] || fail "GET /metrics with a user's (not an admin's) token answered $CODE, not 403"
CODE=$(rmc tokens create --user alice --scope metrics 2>&1 > /dev/null; echo $?)
[ "$CODE" != 0 ] || fail "a metrics token was made for alice, who is not an admin"
rmc tokens create --scope metrics --name prometheus > "$DATA/prometheus.token"
CODE=$("${CURL[@]}" -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $(cat "$DATA/prometheus.token")" "$URL/api/v1/jobs")
[ "$CODE" = 403 ] || fail "a metrics token read the job list: $CODE, not 403"
CODE=$("${CURL[@]}" -o "$DATA/metrics.txt" -D "$DATA/metrics.headers" -w '%{http_code}' \
       -H "Authorization: Bearer $(cat "$DATA/prometheus.token")" "$URL/metrics")
[ "$CODE" = 200 ] || fail "GET /metrics with a metrics token answered $CODE: $(head -c 300 "$DATA/metrics.txt")"
grep -qi '^content-type: text/plain' "$DATA/metrics.headers" ||
  fail "/metrics content type: $(grep -i '^content-type' "$DATA/metrics.headers")"
promtool check metrics < "$DATA/metrics.txt" 2> "$DATA/promtool.out" ||
  { cat "$DATA/promtool.out"; fail "promtool check metrics refused the server's /metrics"; }
pass "/metrics: 401 without a token, 403 for a non-admin, 200 text/plain that promtool accepts for a metrics token (403 elsewhere)"

# 2. A job that keeps running while Prometheus scrapes.
ID=$(echo '{"name": "prom-sleeper", "command": ["sleep", "120"], "resources": {"cpu": 1}}' | rmc submit -)
wait_state "$ID" RUNNING 30

# 3. Prometheus on a free loopback port, scraping every second.
TARGET=${URL#*://}
TARGET=${TARGET%%/*}
SCHEME=${URL%%://*}
{
  echo "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}"
  echo "scrape_configs:"
  echo "  - job_name: ringmaster"
  echo "    scheme: $SCHEME"
  echo "    metrics_path: /metrics"
  echo "    authorization: {type: Bearer, credentials_file: $DATA/prometheus.token}"
  [ "$SCHEME" = https ] && echo "    tls_config: {ca_file: $DATA/tls/ca.crt}"
  echo "    static_configs: [{targets: ['$TARGET']}]"
} > "$DATA/prom.yml"
promtool check config "$DATA/prom.yml" > /dev/null || fail "promtool check config: $(cat "$DATA/prom.yml")"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
for _ in 1 2 3; do  # another process may take the port between free_port and the bind
  PROM_PORT=$(free_port)
  PROM="http://127.0.0.1:$PROM_PORT"
  prometheus --config.file="$DATA/prom.yml" --storage.tsdb.path="$DATA/prom" \
    --web.listen-address="127.0.0.1:$PROM_PORT" >> "$DATA/prometheus.log" 2>&1 &
  PROM_PID=$!
  for _ in $(seq 1 300); do  # 30 s
    kill -0 "$PROM_PID" 2>/dev/null || break
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$PROM/-/ready")" = 200 ] && break
    sleep 0.1
  done
  kill -0 "$PROM_PID" 2>/dev/null && break
  wait "$PROM_PID" 2>/dev/null || true
  PROM_PID=""
done
[ -n "$PROM_PID" ] || { tail -n 20 "$DATA/prometheus.log"; fail "prometheus did not start"; }
[ "$(curl -s -o /dev/null -w '%{http_code}' "$PROM/-/ready")" = 200 ] || fail "prometheus not ready in 30 s"
pass "prometheus $(prometheus --version 2>&1 | head -1 | awk '{print $3}') up on $PROM, scraping $URL/metrics every 1 s"

# 4. Until every answer is in (a hang guard, not a timing check): the node's
# CPU series, the running job, the target up, and a minute's range with >= 2 points.
query() { curl -s -G "$PROM/api/v1/query" --data-urlencode "query=$1"; }
query_range() {
  local now
  now=$(date +%s)
  curl -s -G "$PROM/api/v1/query_range" --data-urlencode "query=$1" \
    --data-urlencode "start=$((now - 60))" --data-urlencode "end=$now" --data-urlencode "step=1"
}
have_cpu() { query 'ringmaster_node_cpu_ratio' | jq -e --arg n "$NODE" '[.data.result[] | select(.metric.node == $n)] | length >= 1' > /dev/null; }
have_running() { query 'ringmaster_jobs{state="running"}' | jq -e '[.data.result[].value[1] | tonumber] | add >= 1' > /dev/null; }
have_up() { query 'up{job="ringmaster"}' | jq -e '.data.result | length == 1 and (.[0].value[1] == "1")' > /dev/null; }
have_range() {
  query_range "ringmaster_node_cpu_ratio{node=\"$NODE\"}" | jq -e '.data.result | length == 1 and (.[0].values | length >= 2)' > /dev/null
}
OK_CPU="" OK_RUNNING="" OK_UP="" OK_RANGE=""
DEADLINE=$((SECONDS + 30))
while [ $SECONDS -lt $DEADLINE ]; do
  [ -n "$OK_UP" ] || { have_up && OK_UP=1; } || true
  [ -n "$OK_CPU" ] || { have_cpu && OK_CPU=1; } || true
  [ -n "$OK_RUNNING" ] || { have_running && OK_RUNNING=1; } || true
  [ -n "$OK_RANGE" ] || { have_range && OK_RANGE=1; } || true
  [ -n "$OK_UP" ] && [ -n "$OK_CPU" ] && [ -n "$OK_RUNNING" ] && [ -n "$OK_RANGE" ] && break
  sleep 0.5
done
if [ -z "$OK_UP" ] || [ -z "$OK_CPU" ] || [ -z "$OK_RUNNING" ] || [ -z "$OK_RANGE" ]; then
  echo "---- the target as Prometheus sees it" >&2
  curl -s "$PROM/api/v1/targets" | jq -c '.data.activeTargets[] | {scrapeUrl, health, lastError}' >&2
  [ -n "$OK_UP" ] || fail "up{job=\"ringmaster\"} is not 1 after 30 s: $(query 'up{job="ringmaster"}')"
  [ -n "$OK_CPU" ] || fail "no ringmaster_node_cpu_ratio{node=\"$NODE\"} after 30 s: $(query ringmaster_node_cpu_ratio)"
  [ -n "$OK_RUNNING" ] || fail "ringmaster_jobs{state=\"running\"} is not >= 1 after 30 s: $(query 'ringmaster_jobs{state="running"}')"
  fail "a 60 s range of ringmaster_node_cpu_ratio{node=\"$NODE\"} has < 2 points after 30 s: $(query_range "ringmaster_node_cpu_ratio{node=\"$NODE\"}")"
fi
pass "Prometheus has up == 1, node $NODE's CPU (>= 2 points in a minute's range) and job $ID running"

rmc cancel "$ID" > /dev/null 2>&1 || true
echo "prometheus_test: all passed"
