#!/usr/bin/env bash
# Notebooks (kind: dev with no command) on a real `ringmaster up`: alice's
# notebook is reached only through the server's proxy at /jobs/ID/lab/ (no
# credentials: 401; bob: 404; alice: Jupyter's pages, its REST API and a
# kernel's WebSocket); `ringmaster dev open` prints the URL; the notebook's
# socket is its task user's alone; idle_timeout ends a notebook by itself.
# With BROWSER=1 it then runs tests/browser/lab_browser_test.py against it.
source "$(dirname "$0")/lib.sh"
start_up
alice_and_bob
URL=$(jq -r .url "$DATA/server.json")

ID=$(echo '{"kind": "dev", "name": "nb", "resources": {"memory": "1Gi"}}' | as_alice submit --no-workdir -)
wait_state "$ID" RUNNING 60
LAB="$URL/jobs/$ID/lab"
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }

# The notebook takes a few seconds to listen: 502 until then.
for _ in $(seq 1 600); do
  [ "$(code -H "Authorization: Bearer $ALICE" "$LAB/tree")" = 200 ] && break
  sleep 0.1
done
[ "$(code -H "Authorization: Bearer $ALICE" "$LAB/tree")" = 200 ] || {
  curl -s -H "Authorization: Bearer $ALICE" "$LAB/tree"; rmc logs "$ID" | tail -20; fail "the notebook never answered"; }
page=$(curl -s -H "Authorization: Bearer $ALICE" "$LAB/tree")
grep -q "<title>Home Page - Select or create a notebook</title>" <<<"$page" || fail "not Jupyter's tree page: ${page:0:300}"
pass "alice reaches her notebook's tree page through the proxy"

[ "$(code "$LAB/tree")" = 401 ] || fail "no credentials: $(code "$LAB/tree"), not 401"
[ "$(code -H "Authorization: Bearer $BOB" "$LAB/tree")" = 404 ] || fail "bob: not 404"
# Not even an admin: the notebook's pages would run alice's code in the admin's session.
[ "$(code -H "Authorization: Bearer $(cat "$DATA/admin.token")" "$LAB/tree")" = 404 ] || fail "an admin: not 404"
[ "$(code -H "Authorization: Bearer $BOB" "$URL/jobs/999999/lab/tree")" = 404 ] || fail "a missing job: not 404"
[ "$(code -H "Authorization: Bearer $ALICE" "$URL/jobs/$ID/lab")" = 301 ] || fail "/jobs/ID/lab does not redirect"
pass "no credentials: 401; bob, an admin and a missing job: 404; /jobs/ID/lab redirects"

# Jupyter's REST API with its own XSRF cookie; the platform's cookies never reach it.
JAR=$TOOLS/cookies
curl -s -o /dev/null -c "$JAR" -H "Authorization: Bearer $ALICE" "$LAB/tree"
XSRF=$(awk '$6 == "_xsrf" {print $7}' "$JAR")
[ -n "$XSRF" ] || fail "no _xsrf cookie from the notebook: $(cat "$JAR")"
grep -q "/jobs/$ID/lab/" "$JAR" || fail "the _xsrf cookie is not on the notebook's path: $(cat "$JAR")"
kernel=$(curl -s -b "$JAR" -H "Authorization: Bearer $ALICE" -H "X-XSRFToken: $XSRF" -X POST \
  -H 'Content-Type: application/json' -d '{"name": "python3"}' "$LAB/api/kernels")
KID=$(jq -r .id <<<"$kernel")
[ -n "$KID" ] && [ "$KID" != null ] || fail "no kernel: $kernel"
curl -s -H "Authorization: Bearer $ALICE" "$LAB/api/kernels" | jq -e --arg k "$KID" 'map(.id) | index($k)' > /dev/null ||
  fail "the kernel is not listed"
pass "a kernel created through Jupyter's REST API ($KID)"

# The kernel's WebSocket: the upgrade goes through, and a frame comes back.
HOSTPORT=${URL#http://}
/usr/bin/python3 - "$HOSTPORT" "/jobs/$ID/lab/api/kernels/$KID/channels" "$ALICE" <<'EOF' || fail "no WebSocket through the proxy"
import base64, json, os, socket, struct, sys, uuid
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=20)
key = base64.b64encode(os.urandom(16)).decode()
s.sendall((f"GET {sys.argv[2]} HTTP/1.1\r\nHost: {sys.argv[1]}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer {sys.argv[3]}\r\n\r\n").encode())
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(4096)
assert head.startswith(b"HTTP/1.1 101"), head[:200]
msg = json.dumps({"header": {"msg_id": uuid.uuid4().hex, "username": "", "session": uuid.uuid4().hex,
                             "msg_type": "kernel_info_request", "version": "5.3"},
                  "parent_header": {}, "metadata": {}, "content": {}, "channel": "shell"}).encode()
mask = os.urandom(4)
frame = bytes([0x81]) + (bytes([0x80 | 126]) + struct.pack(">H", len(msg)) if len(msg) > 125 else bytes([0x80 | len(msg)]))
s.sendall(frame + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(msg)))
got = head.split(b"\r\n\r\n", 1)[1]
while b"kernel_info_reply" not in got:
    chunk = s.recv(65536)
    assert chunk, got[:300]
    got += chunk
EOF
pass "a kernel's WebSocket: 101, and a kernel_info_reply came back"

# ringmaster dev open; lab_url in the job's JSON.
[ "$(as_alice dev open "$ID")" = "$URL/jobs/$ID/lab/" ] || fail "dev open printed '$(as_alice dev open "$ID")'"
[ "$(as_alice show "$ID" --json | jq -r .lab_url)" = "/jobs/$ID/lab/" ] || fail "no lab_url in the job's JSON"
OTHER=$(echo '{"command": "sleep 60", "resources": {"memory": "64Mi"}}' | as_alice submit --no-workdir -)
wait_state "$OTHER" RUNNING 30
if out=$(as_alice dev open "$OTHER" 2>&1); then fail "dev open of a plain job succeeded: $out"; fi
[ "$(wc -l <<<"$out")" = 1 ] || fail "dev open's refusal is not one line: $out"
as_alice cancel "$OTHER" > /dev/null
pass "dev open prints the notebook's URL, and refuses a job that is no notebook"

# The socket: 0600 in a 0700 directory of alice's task user; bob's task cannot connect.
SOCK=$(find "$SANDBOXES" -name notebook.sock -type s | head -1)
[ -S "$SOCK" ] || fail "no notebook socket under $SANDBOXES"
[ "$(stat -c %a "$SOCK")" = 600 ] && [ "$(stat -c %a "$(dirname "$SOCK")")" = 700 ] ||
  fail "socket $(stat -c %a "$SOCK"), directory $(stat -c %a "$(dirname "$SOCK")")"
[ "$(stat -c %u "$SOCK")" = "$(stat -c %u "$(dirname "$SOCK")")" ] && [ "$(stat -c %u "$SOCK")" != 0 ] ||
  fail "the socket is not the task user's"
PROBE=$(jq -n --arg p "$SOCK" '{command: ["python3", "-c",
  "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1]); print(\"CONNECTED\")\nexcept OSError as e:\n print(\"REFUSED\", e)", $p],
  resources: {memory: "64Mi"}}' | as_bob submit --no-workdir -)
wait_state "$PROBE" SUCCEEDED 60
as_bob logs "$PROBE" | grep -q REFUSED || fail "bob's task: $(as_bob logs "$PROBE")"
pass "the notebook's socket is alice's task user's alone: bob's task cannot connect"

BROWSER_RC=0
if [ "${BROWSER:-0}" = 1 ]; then
  SHOTS=$(mktemp -d /tmp/rm-lab-browser.XXXXXX)
  /usr/bin/python3 "$REPO/tests/browser/lab_browser_test.py" --server "$URL" --token "$ALICE" --other-token "$BOB" --job "$ID" \
    --out "$SHOTS" || BROWSER_RC=$?
  [ "$BROWSER_RC" = 0 ] || [ "$BROWSER_RC" = 77 ] || fail "the browser test failed (screenshots in $SHOTS)"
  [ "$BROWSER_RC" = 77 ] || pass "Chromium ran a cell in the notebook through the proxy"
fi
as_alice cancel "$ID" > /dev/null

# idle_timeout: a notebook nobody uses ends by itself.
IDLE=$(echo '{"kind": "dev", "name": "idle", "idle_timeout": "20s", "resources": {"memory": "1Gi"}}' | as_alice submit --no-workdir -)
wait_state "$IDLE" RUNNING 60
for _ in $(seq 1 900); do
  s=$(job_field "$IDLE" state)
  [ "$s" = SUCCEEDED ] || [ "$s" = FAILED ] && break
  sleep 0.1
done
[ "$s" = SUCCEEDED ] || { rmc logs "$IDLE" | tail; fail "the idle notebook is $s after 90s"; }
pass "a notebook with idle_timeout 20s ended by itself"
[ "$BROWSER_RC" = 77 ] && exit 77  # skipped (its reason printed above)
exit 0
