#!/usr/bin/env bash
# A job's network is its own (process executor, one host, `ringmaster up` as
# root, agent --task-network isolated by default), with users alice and bob:
#  1. alice's 2-worker ringcomm job runs its checked all-reduces (rank 0
#     serves the rendezvous store at RINGMASTER_STORE = MASTER_ADDR:MASTER_PORT;
#     rank 1 listens at its own port meanwhile) while bob's task scans every
#     port of the node's range at the node's address and at the first
#     addresses of the jobs' namespaces: it connects to none of them.
#  2. bob's task binding every free port of the node's range does not stop
#     alice's next distributed job.
#  3. given the address anyway (the test enters alice's own job namespace as
#     root, where her store is reachable), a stranger that does not know the
#     job's secret gets the store's challenge and nothing else: its set of
#     rank 1's record and its get are answered by a closed connection, and her
#     real rank 1, held back until then, joins and the job trains.
source "$(dirname "$0")/lib.sh"
BENCH=$(stage_tool "${RINGCOMM_BENCH:?set RINGCOMM_BENCH}")
LO=32540 HI=32559
start_up --cpus 4 --memory 4Gi --ports "$LO-$HI"
alice_and_bob

cat > "$TOOLS/scan.py" <<'PY'
import os, socket, sys, time
lo, hi = int(sys.argv[1]), int(sys.argv[2])
stop, seconds = sys.argv[3], float(sys.argv[4])
node = os.environ["RINGMASTER_ADDR"]
# The node's address at every port of the range, round after round; the
# jobs' namespace addresses (dropped, so each probe waits out its timeout)
# every tenth round.
near = [(node, p) for p in range(lo, hi + 1)]
far = [("10.213.0.%d" % i, p) for i in range(2, 6) for p in range(lo, hi + 1)]
print("scanning", len(near) + len(far), "addresses", flush=True)
got, rounds, deadline = set(), 0, time.time() + seconds
while time.time() < deadline and not os.path.exists(stop):
    for t in near + (far if rounds % 10 == 9 else []):
        s = socket.socket()
        s.settimeout(0.05)
        try:
            s.connect(t)
            got.add(t)
        except OSError:
            pass
        s.close()
    rounds += 1
print("rounds", rounds)
for a, p in sorted(got):
    print("CONNECTED %s:%d" % (a, p))
PY
cat > "$TOOLS/squat.py" <<'PY'
import socket, sys, time
lo, hi = int(sys.argv[1]), int(sys.argv[2])
held = []
for p in range(lo, hi + 1):
    for family, addr in ((socket.AF_INET, "0.0.0.0"),):
        s = socket.socket(family)
        try:
            s.bind((addr, p)); s.listen(1); held.append(s)
        except OSError:
            s.close()
print("holding", len(held), "ports", flush=True)
time.sleep(float(sys.argv[3]))
PY
# rank 1 also keeps a plain listener at its own port (a "listener" of the job's).
cat > "$TOOLS/alice.sh" <<'SH'
if [ "$RANK" = 1 ]; then
  python3 -c 'import os, socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(os.environ["RINGMASTER_PORT"]))); s.listen(8); time.sleep(300)' &
fi
exec "$1" --from-env --sizes 64K:4M --iters 1000 --transport tcp --check --timeout 60
SH
chmod 0755 "$TOOLS/scan.py" "$TOOLS/squat.py" "$TOOLS/alice.sh"
alice_job() {  # alice_job NAME: a 2-worker ringcomm job; prints its id
  jq -n --arg b "$BENCH" --arg s "$TOOLS/alice.sh" --arg n "$1" \
    '{name: $n, kind: "distributed", replicas: 2, resources: {cpu: 1, memory: "256Mi"}, command: ["sh", $s, $b]}' |
    as_alice submit -
}

# ---- 1. bob scans while alice trains
STOP=$TOOLS/stop-scan
BOB_SCAN=$(jq -n --arg s "$TOOLS/scan.py" --arg stop "$STOP" --argjson lo $LO --argjson hi $HI \
  '{name: "bob-scan", resources: {cpu: 1, memory: "128Mi"},
    command: ["python3", $s, ($lo | tostring), ($hi | tostring), $stop, "90"]}' | as_bob submit -)
wait_state "$BOB_SCAN" RUNNING 30
for _ in $(seq 1 100); do as_bob logs "$BOB_SCAN" | grep -q scanning && break; sleep 0.1; done
ALICE1=$(alice_job alice-train)
as_alice wait "$ALICE1" --timeout 120 > /dev/null || { as_alice logs "$ALICE1" | tail; fail "alice's job $ALICE1 did not succeed beside bob's scan"; }
grep -Eq '^\[0\] RESULT ringcomm [a-z-]+/tcp 2 4194304 ' <<<"$(as_alice logs "$ALICE1")" || fail "alice's job ran no all-reduce"
touch "$STOP"
as_bob wait "$BOB_SCAN" --timeout 60 > /dev/null || { as_bob logs "$BOB_SCAN"; fail "bob's scan did not end"; }
SCAN=$(as_bob logs "$BOB_SCAN")
grep -q '^\[0\] rounds [1-9]' <<<"$SCAN" || fail "bob's scan did not complete a round: $SCAN"
grep -q CONNECTED <<<"$SCAN" && fail "bob's task reached alice's store, MASTER_PORT or listener: $(grep CONNECTED <<<"$SCAN")"
pass "bob's task scanned the node's ports ($LO-$HI) while alice's 2-worker job trained, and connected to nothing"

# ---- 2. bob squats every free port of the range; alice's next job still runs
BOB_SQUAT=$(jq -n --arg s "$TOOLS/squat.py" --argjson lo $LO --argjson hi $HI \
  '{name: "bob-squat", resources: {cpu: 1, memory: "128Mi"}, command: ["python3", $s, ($lo | tostring), ($hi | tostring), "120"]}' |
  as_bob submit -)
wait_state "$BOB_SQUAT" RUNNING 30
for _ in $(seq 1 100); do as_bob logs "$BOB_SQUAT" | grep -q holding && break; sleep 0.1; done
HELD=$(as_bob logs "$BOB_SQUAT" | sed -n 's/^\[0\] holding \([0-9]*\) ports$/\1/p')
[ "${HELD:-0}" -ge $((HI - LO)) ] || fail "bob's task held only '${HELD}' of the range's ports"
ALICE2=$(alice_job alice-after-squat)
as_alice wait "$ALICE2" --timeout 120 > /dev/null || { as_alice logs "$ALICE2" | tail; fail "bob holding every port of the range stopped alice's job $ALICE2"; }
as_bob cancel "$BOB_SQUAT" > /dev/null
pass "bob's task held $HELD ports of the range and alice's next distributed job still ran"

# ---- 3. a stranger given the store's address is refused before any key
cat > "$TOOLS/stranger.py" <<'PY'
import socket, struct, sys
host, port = sys.argv[1].rsplit(":", 1)
def request(op, key, value=b""):
    return struct.pack(">BI", op, len(key)) + key + struct.pack(">Q", len(value)) + value
for name, req in (("set", request(1, b"gen/1/rank/1", b"127.0.0.1:1")), ("get", request(2, b"gen/1/rank/0"))):
    s = socket.create_connection((host, int(port)), timeout=5)
    hello = b""
    while len(hello) < 36:
        chunk = s.recv(36 - len(hello))
        if not chunk:
            break
        hello += chunk
    if not hello.startswith(b"RMSC"):
        print("NO-CHALLENGE", name, hello[:8]); sys.exit(1)
    s.sendall(req)
    try:
        rest = s.recv(64)
    except (ConnectionResetError, socket.timeout) as e:
        rest = b""
    print("ANSWERED" if rest else "CLOSED", name, rest[:16])
PY
cat > "$TOOLS/alice-late.sh" <<'SH'
if [ "$RANK" = 1 ]; then sleep 20; else echo "STORE $RINGMASTER_STORE"; fi
exec "$1" --from-env --sizes 64K:1M --iters 200 --transport tcp --check --timeout 60
SH
chmod 0755 "$TOOLS/stranger.py" "$TOOLS/alice-late.sh"
ALICE3=$(jq -n --arg b "$BENCH" --arg s "$TOOLS/alice-late.sh" \
  '{name: "alice-late", kind: "distributed", replicas: 2, resources: {cpu: 1, memory: "256Mi"}, command: ["sh", $s, $b]}' |
  as_alice submit -)
STORE=""
for _ in $(seq 1 200); do
  STORE=$(as_alice logs "$ALICE3" 2>/dev/null | sed -n 's/^\[0\] STORE //p' | head -1)
  [ -n "$STORE" ] && break
  sleep 0.1
done
[ -n "$STORE" ] || fail "alice's job $ALICE3 did not print its store's address"
sleep 2  # rank 0's store is up; rank 1 waits out its 20 s
NS=$(find "$DATA" -path "*/netns/rmj-$ALICE3-*" 2>/dev/null | head -1)
[ -n "$NS" ] || fail "alice's job $ALICE3 has no network namespace under $DATA"
OUT=$(nsenter --net="$NS" python3 "$TOOLS/stranger.py" "$STORE") || fail "the stranger did not reach alice's store: $OUT"
[ "$(grep -c '^CLOSED' <<<"$OUT")" = 2 ] || fail "alice's store answered a stranger's key operation: $OUT"
as_alice wait "$ALICE3" --timeout 120 > /dev/null || { as_alice logs "$ALICE3" | tail; fail "alice's job $ALICE3 did not survive the stranger"; }
grep -Eq '^\[0\] RESULT ringcomm [a-z-]+/tcp 2 1048576 ' <<<"$(as_alice logs "$ALICE3")" || fail "alice's job $ALICE3 ran no all-reduce"
pass "a stranger given alice's store address ($STORE) got its challenge and no answer to a set or a get; her job trained"
echo "tenant_net_test: all passed"
