#!/usr/bin/env bash
# REST API load test (bench/load/README.md): JMeter 2.13 headless against
# `ringmaster up` on 127.0.0.1. N users log in once with their password, then
# loop without think time over submit (a `true` job), list, show, logs,
# metrics, file_put and file_get; the table per request kind comes from the
# JTL (summarize.py), plain and then as markdown on stdout.
# Needs jmeter and jmeter-http (Debian), javac (see xstream_shim), curl, jq.
# Usage: bench/load/run.sh [--build DIR] [--users 64] [--duration 120] [--ramp 10]
#                          [--think MS] [--data DIR] [--out DIR] [--stores "sqlite postgres"]
#   --stores    the metadata stores to run against, one after the other: the
#               embedded SQLite, PostgreSQL 15 started for the run (durable)
#   --data DIR  the server's data dir (default: a fresh one in the temp dir);
#               kept afterwards, and reused users keep their password
#   --out DIR   keep results.jtl, summary.md, jmeter.log, up.log and access.log
set -euo pipefail
BUILD=build USERS=64 DURATION=120 RAMP=10 THINK=0 DATA="" OUT="" STORES="sqlite postgres"
usage() { sed -n '8,14s/^# \{0,1\}//p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --users) USERS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --ramp) RAMP=$2; shift 2 ;;
    --think) THINK=$2; shift 2 ;;
    --data) DATA=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --stores) STORES=$2; shift 2 ;;
    *) usage ;;
  esac
done
for n in "$USERS" "$DURATION" "$RAMP" "$THINK"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "$0: not a number: $n" >&2; usage; }
done
[ "$USERS" -ge 1 ] || { echo "$0: --users must be at least 1" >&2; exit 2; }
# Several stores: this script once per store, each with its own data dir and results.
if [ "$(wc -w <<< "$STORES")" -gt 1 ]; then
  for store in $STORES; do
    echo "== load test against $store" >&2
    "$0" --build "$BUILD" --users "$USERS" --duration "$DURATION" --ramp "$RAMP" --think "$THINK" --stores "$store" \
      ${DATA:+--data "$DATA/$store"} ${OUT:+--out "$OUT/$store"}
  done
  exit 0
fi
case $STORES in sqlite | postgres) ;; *) echo "$0: unknown store $STORES (sqlite, postgres)" >&2; exit 2 ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(readlink -f "$BUILD")
RM=$BUILD/src/cli/ringmaster
[ -x "$RM" ] || { echo "$0: no $RM (build first, or pass --build DIR)" >&2; exit 1; }
for t in jmeter javac jar curl jq; do
  command -v "$t" > /dev/null || { echo "$0: needs $t" >&2; exit 1; }
done
JMETER_HOME=/usr/share/jmeter
[ -f "$JMETER_HOME/lib/ext/ApacheJMeter_http.jar" ] ||
  { echo "$0: JMeter's HTTP sampler is missing: apt-get install jmeter-http" >&2; exit 1; }

PASSWORD=ringmaster-load-test # loopback only, a throwaway server
PREFIX=load
WORK=$(mktemp -d /tmp/rm-load.XXXXXX)
chmod 0711 "$WORK"
[ -n "$DATA" ] && { mkdir -p "$DATA"; DATA=$(readlink -f "$DATA"); } || DATA=$WORK/d
[ -n "$OUT" ] && { mkdir -p "$OUT"; OUT=$(readlink -f "$OUT"); }
UP_PID="" JM_PID="" PG_DIR=""
cleanup() {
  set +e
  [ -n "$PG_DIR" ] && bash "$HERE/../../tests/fixtures/postgres.sh" down "$PG_DIR" > /dev/null
  [ -n "$JM_PID" ] && { kill "$JM_PID"; wait "$JM_PID"; } 2> /dev/null
  [ -n "$UP_PID" ] && { kill "$UP_PID"; wait "$UP_PID"; } 2> /dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# xstream_shim: Debian's JMeter 2.13 predates XStream's type allow-list
# (1.4.18), and with bookworm's XStream 1.4.20 it refuses every test plan
# ("ForbiddenClassException: org.apache.jmeter.save.ScriptWrapper"). Put first
# on its class path a NoTypePermission that allows every type, which is how
# JMeter 2.13 read plans with the XStream it was released with.
xstream_shim() {
  local d=$WORK/shim/src/com/thoughtworks/xstream/security
  mkdir -p "$d" "$WORK/shim/classes"
  cat > "$d/NoTypePermission.java" << 'EOF'
package com.thoughtworks.xstream.security;
public class NoTypePermission implements TypePermission {
    public static final TypePermission NONE = new NoTypePermission();
    public boolean allows(Class type) { return true; }
    public int hashCode() { return 1; }
    public boolean equals(Object o) { return o != null && o.getClass() == NoTypePermission.class; }
}
EOF
  javac --release 8 -nowarn -cp /usr/share/java/xstream.jar -d "$WORK/shim/classes" "$d/NoTypePermission.java" 2> /dev/null
  jar cf "$WORK/shim/shim.jar" -C "$WORK/shim/classes" .
  echo "$WORK/shim/shim.jar:$JMETER_HOME/bin/ApacheJMeter.jar"
}
SHIM_CP=$(xstream_shim)

# The server, with its local agent: no per-user pending-jobs limit (the
# submits outrun a 2-core node's agent), task ports clear of the other benches.
rm -f "$DATA/server.json"
STORE_FLAGS=()
if [ "$STORES" = postgres ]; then
  PG_DIR=$WORK/pg
  bash "$HERE/../../tests/fixtures/postgres.sh" up "$PG_DIR" --durable > /dev/null
  STORE_FLAGS=(--store "$(cat "$PG_DIR/url")")
fi
"$RM" up --data "$DATA" --host 127.0.0.1 --port 0 --sandbox-root "$WORK/sb" --ports 33000-33999 \
  --max-pending-jobs 0 "${STORE_FLAGS[@]}" > "$WORK/up.log" 2>&1 &
UP_PID=$!
rmc() { "$RM" --data "$DATA" "$@"; }
for i in $(seq 300); do
  kill -0 "$UP_PID" 2> /dev/null || { tail -20 "$WORK/up.log" >&2; echo "$0: ringmaster up exited" >&2; exit 1; }
  [ -f "$DATA/server.json" ] && [ "$(jq -r .pid "$DATA/server.json" 2> /dev/null)" = "$UP_PID" ] &&
    rmc nodes 2> /dev/null | grep -q ' ready ' && break
  [ "$i" = 300 ] && { tail -20 "$WORK/up.log" >&2; echo "$0: no ready node after 30 s" >&2; exit 1; }
  sleep 0.1
done
URL=$(jq -r .url "$DATA/server.json")
PORT=${URL##*:}
[[ $URL == http://127.0.0.1:* ]] || { echo "$0: unexpected server URL $URL" >&2; exit 1; }

# The users, load1..loadN, each with the same password (JMeter's thread N is loadN).
for i in $(seq "$USERS"); do
  if ! err=$(printf '%s\n' "$PASSWORD" | rmc users create "$PREFIX$i" --password-stdin 2>&1 > /dev/null); then
    grep -q 'already exists' <<< "$err" || { echo "$0: users create $PREFIX$i: $err" >&2; exit 1; }
  fi
done

echo "load: $USERS users, ${DURATION}s (ramp ${RAMP}s, think ${THINK} ms) against $URL" >&2
cd "$WORK"
FORCE_CLASSPATH=$SHIM_CP JAVA_ARGS="${JVM_ARGS:--Xms256m -Xmx512m}" jmeter -n -t "$HERE/plan.jmx" \
  -l "$WORK/results.jtl" -j "$WORK/jmeter.log" \
  -Jjmeter.save.saveservice.output_format=csv \
  -Jjmeter.save.saveservice.print_field_names=true \
  -Jjmeter.save.saveservice.assertion_results_failure_message=true \
  -Jjmeter.save.saveservice.url=true \
  -Jjmeterengine.nongui.port=0 -Jsummariser.interval=30 \
  -Jhost=127.0.0.1 -Jport="$PORT" -Jusers="$USERS" -Jduration="$DURATION" -Jramp="$RAMP" \
  -Jthink="$THINK" -Juser_prefix="$PREFIX" -Jpassword="$PASSWORD" >&2 &
JM_PID=$!
wait "$JM_PID" || { rc=$?; JM_PID=""; tail -20 "$WORK/jmeter.log" >&2; echo "$0: jmeter exited $rc" >&2; exit 1; }
JM_PID=""
[ -s "$WORK/results.jtl" ] || { tail -20 "$WORK/jmeter.log" >&2; echo "$0: jmeter wrote no results" >&2; exit 1; }

# What the server saw: its 5xx answers and logged errors, and the jobs' states.
{
  echo "server: $(awk '$6 ~ /^5/' "$DATA/access.log" | wc -l) answers 5xx in access.log," \
    "$(grep -c '^[0-9T:.-]* E ' "$WORK/up.log" || true) error lines in up.log"
  echo "jobs: $(curl -sf -H "Authorization: Bearer $(cat "$DATA/admin.token")" \
    "$URL/api/v1/jobs?all=1&limit=10000" |
    jq -r '.jobs | group_by(.state) | map("\(.[0].state) \(length)") | join(", ")')" \
    "(at most the newest 10000)"
} >&2 || true

/usr/bin/python3 "$HERE/summarize.py" "$WORK/results.jtl" \
  --title "API load ($STORES): $USERS users, ${DURATION} s (ramp ${RAMP} s), think time ${THINK} ms, $(nproc) cores" |
  tee "$WORK/summary.txt"
if [ -n "$OUT" ]; then
  sed -n '/^markdown:$/,$p' "$WORK/summary.txt" | tail -n +3 > "$OUT/summary.md"
  cp "$WORK/results.jtl" "$WORK/jmeter.log" "$WORK/up.log" "$OUT/"
  cp "$DATA/access.log" "$OUT/" 2> /dev/null || true
  echo "kept: $OUT/{results.jtl,summary.md,jmeter.log,up.log,access.log}" >&2
fi
