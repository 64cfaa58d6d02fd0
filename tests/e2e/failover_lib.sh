# Two servers on one PostgreSQL (a leader and a standby) with their files on
# a Ceph RGW, for the failover tests. Each test starts its own PostgreSQL and
# RGW in its data dir. Source after lib.sh; end with
#   trap 'rc=$?; set +e; stop_agents; stop_servers; (exit $rc); cleanup' EXIT
declare -A SRV_PID SRV_PORT
PG=$DATA/pg
CEPH=$DATA/ceph
chmod 0711 "$DATA"  # tasks (other uids) reach their sandboxes in $DATA/sandboxes

start_stores() {
  bash "$REPO/tests/fixtures/postgres.sh" up "$PG" > /dev/null
  bash "$REPO/tests/fixtures/ceph.sh" up "$CEPH" > /dev/null
  STORE=$(cat "$PG/url")
  FILES=$(cat "$CEPH/s3.url")
}
stop_stores() {
  bash "$REPO/tests/fixtures/postgres.sh" down "$PG" > /dev/null 2>&1 || true
  bash "$REPO/tests/fixtures/ceph.sh" down "$CEPH" > /dev/null 2>&1 || true
}

# start_srv NAME [FLAG...]: `ringmaster server` NAME on a port of its own, data in $DATA/NAME.
start_srv() {
  local name=$1
  [ -n "${SRV_PORT[$name]:-}" ] || SRV_PORT[$name]=$(free_port)
  "$RM" server --data "$DATA/$name" --port "${SRV_PORT[$name]}" --store "$STORE" --files "$FILES" \
    --server-id "$name" --max-pending-jobs 0 "${@:2}" >> "$DATA/server-$name.log" 2>&1 &
  SRV_PID[$name]=$!
}
srv_url() { echo "http://127.0.0.1:${SRV_PORT[$1]}"; }
role() { curl -s -m 2 "$(srv_url "$1")/healthz" 2>/dev/null | jq -r '.role // empty' 2>/dev/null || true; }
# await_role NAME ROLE SECONDS
await_role() {
  for _ in $(seq 1 $(($3 * 10))); do [ "$(role "$1")" = "$2" ] && return 0; sleep 0.1; done
  tail -20 "$DATA/server-$1.log" >&2
  fail "server $1 is not $2 after $3 s (it says: $(curl -s -m 2 "$(srv_url "$1")/healthz"))"
}
stop_servers() {
  local n
  for n in "${!SRV_PID[@]}"; do
    kill -CONT "${SRV_PID[$n]}" 2>/dev/null || true
    kill -TERM "${SRV_PID[$n]}" 2>/dev/null || true
  done
  for n in "${!SRV_PID[@]}"; do wait "${SRV_PID[$n]}" 2>/dev/null || true; done
  stop_stores
  return 0
}
# Both servers' logs when a test fails.
dump_servers() {
  local n
  for n in "${!SRV_PID[@]}"; do echo "---- server $n (last 30 lines)" >&2; tail -n 30 "$DATA/server-$n.log" >&2; done
  return 0
}

# A leader "a" and a standby "b"; clients and agents get both URLs.
start_pair() {
  start_stores
  start_srv a
  await_role a leader 30
  start_srv b
  await_role b standby 30
  SERVERS="$(srv_url a),$(srv_url b)"
  URL=$SERVERS  # start_agent's --server
  export RINGMASTER_SERVER=$SERVERS
  RINGMASTER_TOKEN=$(cat "$DATA/a/admin.token")
  export RINGMASTER_TOKEN
}
