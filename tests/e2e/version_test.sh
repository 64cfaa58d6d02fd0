#!/usr/bin/env bash
# `ringmaster version` (docs/install.md#versions) and GET /api/v1/version:
#  - --client prints this binary's version and commit and asks no server;
#  - without a server configured, or with one found in the data dir that does
#    not answer, the client's line still prints and the exit status is 0;
#    with --server naming one that does not answer, it is 2;
#  - on `ringmaster up` the server answers its build, the same as the CLI's,
#    and the local agent registered with that version;
#  - a server of another build (a fake one answering 0.0.1) gets a warning.
source "$(dirname "$0")/lib.sh"
: "${RM_VERSION:?set RM_VERSION to the version of the project}"
FAKE_PID=""
trap 'rc=$?; set +e; [ -n "$FAKE_PID" ] && kill "$FAKE_PID" 2>/dev/null; (exit $rc); cleanup' EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
COMMIT_RE='^[0-9a-f]{7,40}(-dirty)?$|^unknown$'

# 1. --client: no server asked, not even the data dir's.
OUT=$("$RM" version --client --json --data "$DATA/none")
[ "$(jq -r .client.version <<<"$OUT")" = "$RM_VERSION" ] || fail "--client --json: version is not $RM_VERSION: $OUT"
COMMIT=$(jq -r .client.git_commit <<<"$OUT")
grep -Eq "$COMMIT_RE" <<<"$COMMIT" || fail "--client --json: git_commit '$COMMIT'"
[ "$(jq -r 'has("server") or has("server_error")' <<<"$OUT")" = false ] || fail "--client asked a server: $OUT"
COMPILER=$(jq -r .client.compiler <<<"$OUT")
PLATFORM=$(jq -r .client.platform <<<"$OUT")
LINE=$("$RM" version --client)
PROTOCOL=$(jq -r .client.agent_protocol <<<"$OUT")
[ "$PROTOCOL" -ge 1 ] || fail "--client --json: agent_protocol '$PROTOCOL'"
[ "$LINE" = "client: ringmaster $RM_VERSION (commit $COMMIT; agent protocol $PROTOCOL; $COMPILER; $PLATFORM)" ] ||
  fail "--client printed '$LINE'"
pass "--client: $LINE"

# 2. No server configured: the client's line, the reason on stderr, exit 0.
RC=0
OUT=$("$RM" version --data "$DATA/none" 2> "$DATA/err") || RC=$?
[ "$RC" = 0 ] || fail "no server configured: exit $RC"
[ "$OUT" = "$LINE" ] || fail "no server configured: stdout '$OUT'"
grep -q '^ringmaster: server: no server given' "$DATA/err" || fail "no server configured: stderr '$(cat "$DATA/err")'"
pass "no server configured: exit 0 and '$(cat "$DATA/err")'"

# 3. --server naming a server that does not answer: exit 2, the client's line still printed.
RC=0
OUT=$("$RM" version --server "http://127.0.0.1:$(free_port)" --token x 2> "$DATA/err") || RC=$?
[ "$RC" = 2 ] || fail "--server unreachable: exit $RC, not 2"
[ "$OUT" = "$LINE" ] || fail "--server unreachable: stdout '$OUT'"
grep -q '^ringmaster: server: cannot reach' "$DATA/err" || fail "--server unreachable: stderr '$(cat "$DATA/err")'"
pass "--server unreachable: exit 2"

# 4. ringmaster up: the server's build is the CLI's; the agent registered with its version.
start_up
OUT=$(rmc version --json 2> "$DATA/err")
[ ! -s "$DATA/err" ] || fail "version against the same build warned: $(cat "$DATA/err")"
[ "$(jq -c .server.version,.server.git_commit <<<"$OUT")" = "$(jq -c .client.version,.client.git_commit <<<"$OUT")" ] ||
  fail "the server's build differs from the CLI's: $OUT"
[ "$(jq -r .server.url <<<"$OUT")" = "$(jq -r .url "$DATA/server.json")" ] || fail "server.url: $OUT"
OUT=$(rmc version)
grep -qx "server: ringmaster $RM_VERSION (commit $COMMIT; .*) at http://127.0.0.1:[0-9]*" <<<"$OUT" ||
  fail "version against ringmaster up: $OUT"
[ "$(rmc nodes --json | jq -r '.nodes[0].agent_version')" = "$RM_VERSION" ] || fail "agent_version: $(rmc nodes --json)"
# Any valid token: an agent's too (it reaches nothing else of the API).
AGENT_TOKEN=$(rmc tokens create --scope agent --node other --name v)
URL=$(jq -r .url "$DATA/server.json")
[ "$(curl -sf -H "Authorization: Bearer $AGENT_TOKEN" "$URL/api/v1/version" | jq -r .version)" = "$RM_VERSION" ] ||
  fail "GET /api/v1/version with an agent token"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/api/v1/version")" = 401 ] || fail "GET /api/v1/version without a token is not 401"
pass "ringmaster up: server and agent run $RM_VERSION (commit $COMMIT); an agent token may ask, no token may not"

# Version skew: an agent of a protocol this server does not speak (one newer,
# one too old) is refused, and says so naming both versions; it registers nothing.
SKEW_TOKEN=$(rmc tokens create --scope agent --node skewed --name skew)
echo "$SKEW_TOKEN" > "$DATA/skew.token"
for p in $((PROTOCOL + 1)) 0; do
  "$RM" agent --server "$URL" --token-file "$DATA/skew.token" --data "$DATA/agent-skew-$p" --node-name skewed \
    --sandbox-root "$SANDBOXES" --protocol-version "$p" > "$DATA/skew-$p.log" 2>&1 &
  SKEW_PID=$!
  for _ in $(seq 1 100); do grep -q "refuses this agent" "$DATA/skew-$p.log" && break; sleep 0.1; done
  kill "$SKEW_PID" 2>/dev/null; wait "$SKEW_PID" 2>/dev/null || true
  grep -q "refuses this agent: agent protocol $p (agent $RM_VERSION) is not one this server speaks: protocol .*$PROTOCOL (server $RM_VERSION)" \
    "$DATA/skew-$p.log" || { cat "$DATA/skew-$p.log"; fail "an agent of protocol $p was not refused naming both versions"; }
done
if rmc nodes | grep -q skewed; then fail "a refused agent's node is listed"; fi
pass "agents of protocols $((PROTOCOL + 1)) and 0 refused: $(grep -o 'agent protocol 0 .*' "$DATA/skew-0.log" | head -1)"

# The data dir's server, stopped: not asked for by name, so still exit 0.
stop_up
RC=0
OUT=$(rmc version 2> "$DATA/err") || RC=$?
[ "$RC" = 0 ] && [ "$OUT" = "$LINE" ] || fail "the data dir's server stopped: exit $RC, stdout '$OUT'"
grep -q '^ringmaster: server: cannot reach' "$DATA/err" || fail "the data dir's server stopped: stderr '$(cat "$DATA/err")'"
pass "the data dir's server stopped: exit 0 and '$(cat "$DATA/err")'"

# 5. A server of another build: both lines, a warning, exit 0. One without a version: exit 2.
python3 - "$DATA/fake.port" <<'PY' &
import http.server, json, os, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        old = {"version": "0.0.1", "git_commit": "0123456789ab", "compiler": "gcc 1", "platform": "linux/amd64"}
        ok = self.path == "/api/v1/version" and self.headers.get("Authorization") == "Bearer old"
        body = json.dumps(old if ok else {}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
PY
FAKE_PID=$!
for _ in $(seq 1 100); do [ -f "$DATA/fake.port" ] && break; sleep 0.1; done
FAKE=http://127.0.0.1:$(cat "$DATA/fake.port")
OUT=$("$RM" version --server "$FAKE" --token old 2> "$DATA/err")
grep -qx "server: ringmaster 0.0.1 (commit 0123456789ab; gcc 1; linux/amd64) at $FAKE" <<<"$OUT" || fail "another build: '$OUT'"
grep -q "the server runs 0.0.1 (commit 0123456789ab), this client $RM_VERSION" "$DATA/err" ||
  fail "another build: no warning: '$(cat "$DATA/err")'"
RC=0
"$RM" version --server "$FAKE" --token other > /dev/null 2> "$DATA/err" || RC=$?
[ "$RC" = 2 ] && grep -q 'no "version"' "$DATA/err" || fail "an answer without a version: exit $RC, '$(cat "$DATA/err")'"
pass "another build's server: warned; an answer without a version: exit 2"
