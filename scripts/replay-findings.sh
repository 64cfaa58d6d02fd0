#!/usr/bin/env bash
# Replays the API-level findings of a hostile outside probe against one
# `ringmaster` binary, and prints what it observed, one line per finding
# number. It asserts nothing: run it on two builds and compare, e.g.
#   git worktree add /tmp/rm-old 97c2f9d && cmake -S /tmp/rm-old -B /tmp/rm-old/build -G Ninja \
#     && ninja -C /tmp/rm-old/build ringmaster
#   scripts/replay-findings.sh /tmp/rm-old/build/src/cli/ringmaster   # before
#   scripts/replay-findings.sh build/src/cli/ringmaster               # after
# The tests that guard each fix are in src/server/server_test.cc and tests/e2e/.
# Run as root (`up` runs tasks); it starts its own `up` on a random loopback port
# and stops it by pid. Needs curl, jq and /usr/bin/python3.
set -uo pipefail
BIN=${1:?usage: replay-findings.sh RINGMASTER_BINARY}
DATA=$(mktemp -d /tmp/rm-probe.XXXXXX)
chmod 0700 "$DATA"
PORT=$((20000 + RANDOM % 20000))
EXTRA=()
"$BIN" up --help 2>/dev/null | grep -q -- --sandbox-root && EXTRA=(--sandbox-root "$DATA/sandboxes")
"$BIN" up --data "$DATA" --port "$PORT" --cpus 2 "${EXTRA[@]}" > "$DATA/up.log" 2>&1 &
UP=$!
trap 'kill $UP 2>/dev/null; wait $UP 2>/dev/null; rm -rf "$DATA"' EXIT
for _ in $(seq 100); do [ -f "$DATA/server.json" ] && "$BIN" --data "$DATA" nodes 2>/dev/null | grep -q ready && break; sleep 0.2; done
URL=$(jq -r .url "$DATA/server.json")
ADMIN=$(cat "$DATA/admin.token")
rmc() { "$BIN" --data "$DATA" "$@"; }
say() { printf '%-4s %s\n' "$1" "$2"; }
c() { curl -s --max-time 10 "$@"; }
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@"; }
raw() { /usr/bin/python3 - "$PORT" "$1" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(sys.argv[2].encode().decode("unicode_escape").encode("latin-1"))
try:
    data = s.recv(4096)
except socket.timeout:
    data = b"(no answer in 5 s)"
print(data.split(b"\r\n")[0].decode(errors="replace") or "(connection closed)")
PY
}

printf 'correct horse\n' | rmc users create alice --password-stdin > /dev/null 2>&1
ALICE=$(rmc tokens create --user alice)
AH=(-H "Authorization: Bearer $ALICE")

t1=$(curl -s -o /dev/null -w '%{time_total}' -X POST -d "" -u alice:wrong "$URL/api/v1/tokens")
t2=$(curl -s -o /dev/null -w '%{time_total}' -X POST -d "" -u zz-unknown:wrong "$URL/api/v1/tokens")
say 7b "timing: wrong password for alice ${t1}s vs unknown user ${t2}s"

# 7: 30 wrong passwords, then timing of a known vs unknown user.
codes=$(for i in $(seq 30); do code -X POST -d "" -u alice:wrong$i "$URL/api/v1/tokens"; echo; done | sort | uniq -c | tr '\n' ' ')
known=$(curl -s -o /dev/null -w '%{time_total}' -X POST -d "" -u carol:x "$URL/api/v1/tokens" --max-time 60)
unknown=$(curl -s -o /dev/null -w '%{time_total}' -X POST -d "" -u nobody-here:x "$URL/api/v1/tokens" --max-time 60)
say 7 "30 wrong passwords for alice -> $codes; then the right one: $(code -X POST -d "" -u "alice:correct horse" "$URL/api/v1/tokens")"
# 8 / 15: the tokens endpoint without a token.
say 8 "POST /tokens, no token, body '{': $(code -X POST -d '{' "$URL/api/v1/tokens")"
say 15 "POST /tokens, no token, {\"name\":5}: $(code -X POST -d '{"name":5}' "$URL/api/v1/tokens") $(c -X POST -d '{"name":5}' "$URL/api/v1/tokens" | head -c 120)"
say 15b "invalid UTF-8 in a spec: $(printf '{"command":"echo \xff","resources":{"cpu":64}}' | code -X POST "${AH[@]}" --data-binary @- "$URL/api/v1/jobs")"

# 16: NUL in a command.
say 16 "NUL in command: $(code -X POST "${AH[@]}" -d '{"command":"echo a\u0000b","resources":{"cpu":64}}' "$URL/api/v1/jobs")"

# 17: bad rank parameters.
JOB=$(c -X POST "${AH[@]}" -d '{"command":"echo hi","resources":{"cpu":1}}' "$URL/api/v1/jobs" | jq -r .id)
sleep 2
say 17 "logs?rank=-5: $(code "${AH[@]}" "$URL/api/v1/jobs/$JOB/logs?rank=-5")  rank=4294967296: $(code "${AH[@]}" "$URL/api/v1/jobs/$JOB/logs?rank=4294967296") body: $(c "${AH[@]}" "$URL/api/v1/jobs/$JOB/logs?rank=4294967296" | head -c 60 | tr '\n' ' ')"

# 18: error bodies.
say 18 "unknown route: $(code "${AH[@]}" "$URL/api/v1/nope") body=[$(c "${AH[@]}" "$URL/api/v1/nope" | head -c 80)]; empty POST /jobs (Content-Length: 0): $(code -X POST -d "" "${AH[@]}" "$URL/api/v1/jobs") body=[$(c -X POST -d "" "${AH[@]}" "$URL/api/v1/jobs" | head -c 80)]; POST with no length: $(code -X POST "${AH[@]}" "$URL/api/v1/jobs")"

# 19: ambiguous framing.
say 19 "two Content-Lengths: $(raw "POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $ALICE\r\nContent-Type: application/json\r\nContent-Length: 41\r\nContent-Length: 41\r\n\r\n{\"command\":\"true\",\"resources\":{\"cpu\":64}}")"
say 19b "CL + chunked: $(raw "POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer $ALICE\r\nContent-Type: application/json\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n29\r\n{\"command\":\"true\",\"resources\":{\"cpu\":64}}\r\n0\r\n\r\n")"

# 4: body before authentication; chunked bodies past the limit.
say 4 "20 MiB Content-Length announced, no token, no body sent: $(raw "POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 20971520\r\n\r\n")"
big=$( (printf '{"command":"true","resources":{"cpu":64},"env":{"A":"'; head -c 20000000 /dev/zero | tr '\0' a; printf '"}}') | curl -s -o /dev/null -w '%{http_code}' -X POST "${AH[@]}" -H 'Transfer-Encoding: chunked' --data-binary @- "$URL/api/v1/jobs")
say 4b "20 MB chunked spec with a token: $big"
nt=$( (head -c 20000000 /dev/zero | tr '\0' a) | curl -s -o /dev/null -w '%{http_code} after uploading %{size_upload} bytes' -X POST -H 'Transfer-Encoding: chunked' --data-binary @- "$URL/api/v1/jobs")
say 4c "20 MB chunked body, no token: $nt"

# 3: YAML alias expansion.
bomb=$( /usr/bin/python3 - <<'PY'
lines = ['command: "true"', 'resources: {cpu: 64}', 'env:', '  A0: &a "' + 'x' * 100000 + '"']
lines += [f'  A{i}: *a' for i in range(1, 1000)]
print('\n'.join(lines))
PY
)
resp=$(printf '%s' "$bomb" | c -X POST "${AH[@]}" -H 'Content-Type: application/yaml' --data-binary @- "$URL/api/v1/jobs")
say 3 "alias bomb ($(printf '%s' "$bomb" | wc -c) bytes): $(echo "$resp" | head -c 150)"

# 20: token names and counts.
long=$(head -c 1000 /dev/zero | tr '\0' n)
say 20 "1000-character token name: $(code -X POST "${AH[@]}" -d "{\"name\":\"$long\"}" "$URL/api/v1/tokens")"
n201=0; for i in $(seq 120); do [ "$(code -X POST "${AH[@]}" -d "{\"name\":\"t$i\"}" "$URL/api/v1/tokens")" = 201 ] && n201=$((n201+1)); done
say 20b "120 more tokens for alice: $n201 created"

# 12: admin revokes another user's token; disable a user.
TID=$(c "${AH[@]}" "$URL/api/v1/tokens" | jq -r '.tokens[-1].id')
say 12 "admin DELETE alice's token $TID: $(code -X DELETE -H "Authorization: Bearer $ADMIN" "$URL/api/v1/tokens/$TID"); disable: $(rmc users disable alice > /dev/null 2>&1 && echo ok || echo 'no such command')"
rmc users enable alice > /dev/null 2>&1

# 13: the admin token acts as an agent.
NODE=$(rmc nodes --json | jq '.nodes[0].id')
say 13 "admin token on the agent heartbeat: $(code -X POST -H "Authorization: Bearer $ADMIN" -d '{}' "$URL/api/v1/agent/nodes/$NODE/heartbeat")"

# 11: pending jobs per user.
ok=0; for i in $(seq 510); do [ "$(code -X POST "${AH[@]}" -d '{"command":"true","resources":{"cpu":64}}' "$URL/api/v1/jobs")" = 201 ] && ok=$((ok+1)); done
say 11 "510 pending submits (after ~3 earlier): $ok accepted"

# 22: the checkpoint dir exists for the task.
J=$(c -X POST -H "Authorization: Bearer $ADMIN" -d '{"command":"test -d \"$RINGMASTER_CHECKPOINT_DIR\"","resources":{"cpu":1},"working_dir":"/tmp"}' "$URL/api/v1/jobs" | jq -r .id)
for _ in $(seq 50); do st=$(c -H "Authorization: Bearer $ADMIN" "$URL/api/v1/jobs/$J" | jq -r .state); case $st in SUCCEEDED|FAILED) break;; esac; sleep 0.3; done
say 22 "task tests -d \$RINGMASTER_CHECKPOINT_DIR: $st"

# 23: 20 keep-alive requests on one connection.
urls=(); for i in $(seq 20); do urls+=(-o /dev/null "$URL/api/v1/whoami"); done
t=$(curl -s -w '%{http_code} %{time_total}\n' -H "Authorization: Bearer $ADMIN" "${urls[@]}" | awk '{s+=$2; c[$1]++} END {for (k in c) printf "%s x%d ", k, c[k]; printf "in %.3f", s}')
say 23 "20 keep-alive requests on one connection: ${t}s"

# 21: access log.
say 21 "access-log lines naming GET /api/v1/whoami: $(grep -c 'GET /api/v1/whoami' "$DATA/up.log" "$DATA"/*.log 2>/dev/null | awk -F: '{s+=$NF} END {print s+0}')"

# 14: TLS.
say 14 "up --tls: $("$BIN" up --help 2>&1 | grep -c -- '--tls') help lines mention --tls"
kill -0 $UP 2>/dev/null && say "" "server still up at the end" || say "" "SERVER DIED"
