#!/usr/bin/env bash
# Users' own images: `ringmaster images push --from FILE.tar` of a `docker save`
# tar and of an OCI layout tar into alice's namespace, served by the server as
# a read-only registry, under one container executor ($1: runc, the default, or docker):
#  1. both push; `images ls` shows them to alice and not to bob; alice's file
#     usage grew by the image's bytes;
#  2. alice's job runs in <server>/alice/base:v1, pinned to its digest;
#  3. bob's submit of it fails (not found), and bob's reads of /v2/alice/...
#     answer 404 NAME_UNKNOWN, as does an agent's of an image none of its
#     tasks runs; anonymous ones 401 with a Basic challenge;
#  4. a tampered tar is refused, with one line, storing nothing.
source "$(dirname "$0")/lib.sh"
EXEC=${1:-runc}
: "${REGISTRY_DIR:?set REGISTRY_DIR to the directory of tests/fixtures/registry.sh}"
# shellcheck source=/dev/null
source "$REGISTRY_DIR/registry.env"
IMAGE_CACHE=${IMAGE_CACHE:-$DATA/image-cache}
trap 'rc=$?; set +e; stop_agents; (exit $rc); cleanup' EXIT

SKOPEO=(skopeo --policy "$REGISTRY_DIR/policy.json")
TARS=$(mktemp -d /tmp/rm-e2e-tars.XXXXXX)
"${SKOPEO[@]}" copy -q --src-tls-verify=false "docker://$RM_REGISTRY_ANON/lab/base:v1" \
  "docker-archive:$TARS/save.tar:lab/base:v1" || fail "skopeo docker-archive"
"${SKOPEO[@]}" copy -q --src-tls-verify=false "docker://$RM_REGISTRY_ANON/lab/base:v1" \
  "oci-archive:$TARS/oci.tar:v1" || fail "skopeo oci-archive"

start_server
case $EXEC in
  runc) PORTS=32600-32619; FLAGS=(--executors process,runc) ;;
  docker) PORTS=32620-32639; FLAGS=(--executors process,docker --docker-socket "${DOCKER_SOCK:?set DOCKER_SOCK}" --task-network host) ;;
  *) fail "unknown executor $EXEC" ;;
esac
start_agent node-a "$PORTS" "$SANDBOXES" "${FLAGS[@]}" --image-cache "$IMAGE_CACHE"
await_nodes 1
OWN=${URL#*://}
alice_and_bob
usage() { curl -sf -H "Authorization: Bearer $(cat "$DATA/admin.token")" "$URL/api/v1/users" |
  jq -r --arg u "$1" '.users[] | select(.name == $u) | .files.bytes'; }
pass "server and a $EXEC agent at $OWN; $TARS/save.tar and oci.tar of lab/base:v1"

# ---- 1. push both; ls; usage
BEFORE=$(usage alice)
OUT=$(as_alice images push --from "$TARS/save.tar" 2> "$TARS/push.err") || { cat "$TARS/push.err"; fail "push of save.tar"; }
[ "$(tail -1 <<<"$OUT" | cut -d' ' -f1)" = "$OWN/alice/base:v1" ] || fail "push printed \"$OUT\", not $OWN/alice/base:v1"
[ "$(grep -c "^users/alice/images/blobs/sha256/" <<<"$OUT")" -ge 3 ] || fail "push printed no line per blob: $OUT"
OUT=$(as_alice images push oci-base --from "$TARS/oci.tar" 2> "$TARS/push2.err") ||
  { cat "$TARS/push2.err"; fail "push of oci.tar"; }
[ "$(tail -1 <<<"$OUT" | cut -d' ' -f1)" = "$OWN/alice/oci-base:v1" ] || fail "push printed \"$OUT\", not $OWN/alice/oci-base:v1"
LS=$(as_alice images ls)
grep -q "base:v1 .*$OWN/alice/base:v1" <<<"$LS" || fail "alice's images ls: $LS"
grep -q "oci-base:v1 .*$OWN/alice/oci-base:v1" <<<"$LS" || fail "alice's images ls: $LS"
as_bob images ls | grep -q "alice" && fail "bob's images ls shows alice's: $(as_bob images ls)"
AFTER=$(usage alice)
BLOBS=$(as_alice files ls users/alice/images/blobs/sha256/ --json | jq '[.[].size] | add')
[ "$((AFTER - BEFORE))" -ge "$BLOBS" ] && [ "$BLOBS" -gt 1000000 ] ||
  fail "alice's usage grew by $((AFTER - BEFORE)) bytes, her image blobs hold $BLOBS"
pass "both tars pushed; images ls shows them to alice only; her usage grew by $((AFTER - BEFORE)) bytes"

# ---- 2. alice's job in her image
ID=$(jq -n --arg i "$OWN/alice/base:v1" --arg e "$EXEC" '{name: "mine", image: $i, executor: $e,
  resources: {cpu: 0.5, memory: "256Mi"}, command: ["sh", "-c", "cat /etc/os-release | head -1; echo IN-MY-IMAGE"]}' |
  as_alice submit --no-workdir -)
PINNED=$(as_alice show "$ID" --json | jq -r .spec.image)
[[ "$PINNED" == "$OWN/alice/base:v1@sha256:"* ]] || fail "job $ID pinned to $PINNED"
as_alice wait "$ID" --timeout 240 > /dev/null || { as_alice show "$ID"; as_alice logs "$ID"; fail "job $ID did not succeed"; }
as_alice logs "$ID" | grep -q IN-MY-IMAGE || fail "job $ID printed $(as_alice logs "$ID")"
grep -q "started task .* with $EXEC (image $OWN/alice/base:v1@" "$DATA/agent-node-a.log" || fail "not run with $EXEC"
pass "$EXEC: alice's job ran in $PINNED"

# ---- 3. bob may not
if ERR=$(jq -n --arg i "$OWN/alice/base:v1" '{name: "theirs", image: $i, executor: "runc",
  resources: {cpu: 0.5, memory: "256Mi"}, command: ["true"]}' | as_bob submit --no-workdir - 2>&1); then
  fail "bob submitted a job in alice's image"
fi
grep -q "not found" <<<"$ERR" || fail "bob's submit said: $ERR"
DIGEST=${PINNED#*@}
for path in "manifests/v1" "manifests/$DIGEST"; do
  CODE=$(curl -s -o "$TARS/bob.json" -w '%{http_code}' -u "bob:$BOB" "$URL/v2/alice/base/$path")
  [ "$CODE" = 404 ] && [ "$(jq -r '.errors[0].code' "$TARS/bob.json")" = NAME_UNKNOWN ] ||
    fail "bob's GET /v2/alice/base/$path: $CODE $(cat "$TARS/bob.json")"
done
# The agent's token reads only what a task on its node runs: nothing of alice's now.
CODE=$(curl -s -o "$TARS/agent.json" -w '%{http_code}' -u "ringmaster:$(cat "$DATA/node-a.token")" \
  "$URL/v2/alice/oci-base/manifests/v1")
[ "$CODE" = 404 ] || fail "the agent's token read alice/oci-base, which none of its tasks runs: $CODE"
CODE=$(curl -s -o /dev/null -D "$TARS/anon.h" -w '%{http_code}' "$URL/v2/alice/base/manifests/v1")
[ "$CODE" = 401 ] && grep -qi '^www-authenticate: Basic realm="ringmaster"' "$TARS/anon.h" ||
  fail "an anonymous GET answered $CODE $(cat "$TARS/anon.h")"
CODE=$(curl -s -o /dev/null -D "$TARS/alice.h" -w '%{http_code}' -u "x:$ALICE" "$URL/v2/alice/base/manifests/v1")
[ "$CODE" = 200 ] && grep -qi "^docker-content-digest: $DIGEST" "$TARS/alice.h" || fail "alice's GET answered $CODE"
pass "bob cannot pin alice's image and reads 404 NAME_UNKNOWN; no token gets 401 with a Basic challenge"

# ---- 4. a tampered tar
mkdir "$TARS/t" && tar -xf "$TARS/save.tar" -C "$TARS/t"
LAYER=$(jq -r '.[0].Layers[0]' "$TARS/t/manifest.json")
chmod u+w "$TARS/t/$LAYER" && printf 'x' >> "$TARS/t/$LAYER"
tar -cf "$TARS/tampered.tar" -C "$TARS/t" .
USED=$(usage alice)
mkdir "$TARS/tmp"
if ERR=$(TMPDIR=$TARS/tmp as_alice images push tampered:v1 --from "$TARS/tampered.tar" 2>&1); then fail "a tampered tar was pushed"; fi
[ "$(wc -l <<<"$ERR")" -le 2 ] && grep -q "sha256" <<<"$ERR" || fail "the tampered tar's refusal: $ERR"
[ -z "$(ls -A "$TARS/tmp")" ] || fail "the refused push left $(ls "$TARS/tmp") in its TMPDIR"
[ "$(usage alice)" = "$USED" ] || fail "the tampered push stored bytes"
as_alice images ls | grep -q "tampered" && fail "images ls shows the tampered image"
pass "a tampered tar is refused: $ERR"
rm -rf "$TARS"
