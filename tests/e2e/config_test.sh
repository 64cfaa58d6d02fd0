#!/usr/bin/env bash
# `--config FILE` of the daemons (docs/install.md):
#  - a server reads its flags, global ones (--data) included, from a TOML file
#    and listens on the file's port;
#  - the shipped examples (deploy/config/*.toml) hold only real flags: a server
#    and an agent start from them, with the command line replacing the file's
#    host, port, data dir, server, CA and paths, and the agent runs a task;
#  - an agent takes its server, token file and node flags from a file, and
#    --node-name on the command line wins (its token is bound to that name);
#  - a key that is no flag of the command, a section, a bad value or a
#    missing file is refused with one line and exit 2, before anything starts.
source "$(dirname "$0")/lib.sh"
trap 'rc=$?; set +e; stop_agents; (exit $rc); cleanup' EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# refused FILE CMD WANT: `ringmaster CMD --config FILE` exits 2 with one line matching WANT.
refused() {
  local rc=0 err
  err=$("$RM" $2 --config "$1" 2>&1 >/dev/null) || rc=$?
  [ "$rc" = 2 ] || fail "$2 --config $1: exit $rc, not 2 ($err)"
  [ "$(wc -l <<<"$err")" = 1 ] || fail "$2 --config $1: more than one line: $err"
  grep -Eq -- "$3" <<<"$err" || fail "$2 --config $1: '$err' does not match /$3/"
}

# server_url: waits for the server this test started to answer; prints its URL.
server_url() {
  for _ in $(seq 1 100); do
    if [ -f "$DATA/server.json" ] && curl -sf --cacert "$DATA/tls/ca.crt" "$(jq -r .url "$DATA/server.json")/healthz" > /dev/null; then
      jq -r .url "$DATA/server.json"
      return 0
    fi
    kill -0 "$UP_PID" 2>/dev/null || break
    sleep 0.1
  done
  cat "$DATA/server.log" >&2
  fail "the server did not start"
}

PORT=$(free_port)
cat > "$DATA/server.toml" <<EOF
# what deploy/config/server.toml looks like, on loopback
data = "$DATA"
host = "127.0.0.1"
port = $PORT
max-pending-jobs = 50   # a comment after a value
EOF

"$RM" server --config "$DATA/server.toml" >> "$DATA/server.log" 2>&1 &
UP_PID=$!
URL=$(server_url)
[ "$URL" = "http://127.0.0.1:$PORT" ] || fail "server with port = $PORT in its config listens at $URL"
curl -sf "http://127.0.0.1:$PORT/healthz" > /dev/null || fail "nothing answers on port $PORT"
pass "server --config: data dir and port $PORT from the file"

stop_up
rm -f "$DATA/server.json"
# The shipped file says host = "0.0.0.0", port = 8080, data = "/var/lib/ringmaster".
"$RM" server --config "$REPO/deploy/config/server.toml" --data "$DATA" --host 127.0.0.1 --port 0 --tls \
  >> "$DATA/server.log" 2>&1 &
UP_PID=$!
URL=$(server_url)
[[ "$URL" == https://127.0.0.1:* && "${URL##*:}" != 8080 ]] || fail "the command line did not replace the file's host and port: $URL"
pass "server --config deploy/config/server.toml, host, port and data from the command line: $URL"

# The token is bound to node cfg-b: the agent registers only if --node-name
# on the command line wins over the file's node-name = "cfg-a".
rmc tokens create --scope agent --node cfg-b --name "agent cfg-b" > "$DATA/cfg-b.token"
cat > "$DATA/agent.toml" <<EOF
server = "$URL"
ca = "$DATA/tls/ca.crt"
data = "$DATA/agent-cfg-b"
token-file = "$DATA/cfg-b.token"
node-name = "cfg-a"
sandbox-root = "$SANDBOXES"
cpus = 1
memory = "1Gi"
ports = "31900-31909"
label = ["zone=z1", "rack=r1"]
EOF
"$RM" agent --config "$DATA/agent.toml" --node-name cfg-b >> "$DATA/agent-cfg-b.log" 2>&1 &
AGENT_PID[cfg-b]=$!
rmc tokens create --scope agent --node deploy-node --name "agent deploy-node" > "$DATA/deploy-node.token"
"$RM" agent --config "$REPO/deploy/config/agent.toml" --server "$URL" --ca "$DATA/tls/ca.crt" \
  --token-file "$DATA/deploy-node.token" --data "$DATA/agent-deploy-node" --sandbox-root "$SANDBOXES" \
  --node-name deploy-node --label role=deploy --ports 31910-31919 >> "$DATA/agent-deploy-node.log" 2>&1 &
AGENT_PID[deploy-node]=$!
await_nodes 2
ID=$(jq -n '{name: "deploy", node_selector: {role: "deploy"}, resources: {cpu: 0.1, memory: "16Mi"}, command: "echo ran"}' | rmc submit -)
rmc wait "$ID" --timeout 30 > /dev/null || { rmc show "$ID"; fail "job $ID on the agent of deploy/config/agent.toml did not succeed"; }
rmc logs "$ID" | grep -q ran || fail "job $ID: no output"
pass "agent --config deploy/config/agent.toml runs a task"
NODE=$(rmc nodes --json | jq -c '.nodes[] | select(.name == "cfg-b") | {name, cpu, memory_bytes, labels}')
[ "$NODE" = '{"name":"cfg-b","cpu":"1","memory_bytes":1073741824,"labels":{"rack":"r1","zone":"z1"}}' ] ||
  { rmc nodes; fail "node is $NODE, not cfg-b with the file's cpus = 1, memory = 1Gi and labels"; }
pass "agent --config: server, token file, cpus, memory and labels from the file, --node-name from the command line"

printf 'port = 1\nbogus-flag = 1\n' > "$DATA/bad.toml"
refused "$DATA/bad.toml" server '^ringmaster: --config .*bad.toml: "bogus-flag" is not a flag of `ringmaster server`$'
printf 'node-name = "x"\n' > "$DATA/node.toml"
refused "$DATA/node.toml" server '"node-name" is not a flag of `ringmaster server`'
printf '[agent]\nnode-name = "x"\n' > "$DATA/section.toml"
refused "$DATA/section.toml" agent 'no sections'
refused "$DATA/missing.toml" up '^ringmaster: --config: .*missing.toml was not readable'
printf 'port = "eighty"\n' > "$DATA/value.toml"
refused "$DATA/value.toml" server 'port = eighty .*--config .*value.toml'
pass "an unknown key, a section, a bad value and a missing file are refused with one line and exit 2"
