#!/usr/bin/env bash
# TLS end to end: `ringmaster up --tls` makes a CA and a certificate in its
# data dir; the CLI trusts it from there (or --ca); submit, logs (follow) and
# cancel all go over HTTPS; plain HTTP sent to the TLS port fails with a clear
# message, and an untrusting client refuses the certificate.
source "$(dirname "$0")/lib.sh"
start_up --cpus 2 --tls
URL=$(jq -r .url "$DATA/server.json")
[[ "$URL" == https://127.0.0.1:* ]] || fail "server.json url is $URL, not https"
[ -f "$DATA/tls/ca.crt" ] || fail "no CA certificate in the data dir"
[ "$(stat -c %a "$DATA/tls/server.key")" = 600 ] || fail "the server key is not private"
openssl verify -CAfile "$DATA/tls/ca.crt" "$DATA/tls/server.crt" > /dev/null || fail "the server certificate does not chain to the CA"
pass "up --tls: https URL, CA and a private key in the data dir"

write_spec "$TOOLS/tick.yaml" <<'YAML'
name: tick
command: |
  echo "over tls"
  for i in $(seq 1 600); do echo "tick $i"; sleep 0.1; done
resources: {cpu: 1, memory: 64Mi}
YAML
ID=$(rmc submit --no-workdir "$TOOLS/tick.yaml")
wait_state "$ID" RUNNING 30
FOLLOW=$(timeout 20 "$RM" --data "$DATA" logs -f "$ID" 2>/dev/null | head -n 3 || true)
grep -qx '\[0\] over tls' <<<"$FOLLOW" || fail "logs -f over TLS: $FOLLOW"
rmc cancel "$ID" > /dev/null 2>&1 || true
[ "$(job_field "$ID" state)" = CANCELLED ] || fail "cancel over TLS: job $ID is $(job_field "$ID" state)"
rmc logs "$ID" | grep -q '^\[0\] tick 1$' || fail "logs over TLS"
pass "submit, logs -f, cancel and logs through the CLI over HTTPS"

# The same CLI given only --ca (as a remote user would), and curl with the CA.
RINGMASTER_SERVER=$URL "$RM" --data /nonexistent --token "$(cat "$DATA/admin.token")" --ca "$DATA/tls/ca.crt" whoami |
  grep -q '^admin ' || fail "--ca did not let the CLI trust the server"
curl -s --cacert "$DATA/tls/ca.crt" "$URL/healthz" | grep -q '"status":"ok"' || fail "curl --cacert"

# Plain HTTP to the TLS port: a clear message, from curl and from the CLI.
PLAIN="http://${URL#https://}"
OUT=$(curl -s "$PLAIN/healthz")
grep -q 'this server speaks HTTPS only: use an https:// URL' <<<"$OUT" || fail "plain HTTP to the TLS port answered: $OUT"
set +e
ERR=$("$RM" --server "$PLAIN" --token x whoami 2>&1); RC=$?
set -e
[ "$RC" != 0 ] && [ "$(wc -l <<<"$ERR")" = 1 ] && grep -q 'use an https:// URL' <<<"$ERR" || fail "CLI over plain HTTP: $ERR"
# A client that does not trust the CA refuses the certificate, and says what to do.
set +e
ERR=$("$RM" --server "$URL" --token x --data /nonexistent whoami 2>&1); RC=$?
set -e
[ "$RC" != 0 ] && grep -q 'pass --ca' <<<"$ERR" || fail "an untrusting CLI: $ERR"
pass "plain HTTP on the TLS port: '$OUT'; an untrusting CLI: '$ERR'"
echo "tls_test: all passed"
