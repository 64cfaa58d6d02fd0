#!/usr/bin/env bash
# Images from OCI registries (the tests' registries: tests/fixtures/registry.sh),
# under one container executor ($1: runc or docker):
#  1. a user's registry login is kept sealed: `registry ls` shows no password,
#     and no file of the server's (database, logs) holds it; a task's
#     environment and files do not either;
#  2. the 2-worker Fashion-MNIST job runs in lab/torch:v1 pulled by tag from
#     the authenticated registry (TLS + htpasswd) and reaches >= 0.85; the job
#     is pinned to the manifest digest (`show`);
#  3. a tag moved after submit does not change what a restart runs, while a
#     new job gets the new image;
#  4. wrong or missing credentials: bob (no login) and bob with a wrong
#     password are refused at submit with the registry and 401 named, by tag
#     and by digest (alice's login is hers alone); alice's job whose login went
#     bad before it started fails with a reason naming the registry and 401;
#  5. (runc) bad images, each failing its task's start with a reason that
#     says which and leaving nothing outside the layer cache and no half
#     layer in it: a "../" path, a write through a symlink, a device node, a
#     hard link outside, a decompression bomb, a blob whose bytes do not match
#     its digest; a missing image, an image only for another platform, an
#     index (resolved to this platform), and a registry that is down or
#     never answers, refused at submit.
source "$(dirname "$0")/lib.sh"
EXEC=${1:?usage: registry_images_test.sh runc|docker}
: "${REGISTRY_DIR:?set REGISTRY_DIR to the directory of tests/fixtures/registry.sh}"
# shellcheck source=/dev/null
source "$REGISTRY_DIR/registry.env"
IMAGE_CACHE=${IMAGE_CACHE:-$DATA/image-cache}
SLOW_PID=""
trap 'rc=$?; set +e; [ -n "$SLOW_PID" ] && kill "$SLOW_PID" 2>/dev/null; stop_agents; (exit $rc); cleanup' EXIT

case $EXEC in
  runc) PORTS=32560-32579; FLAGS=(--executors process,runc) ;;
  docker) PORTS=32580-32599; FLAGS=(--executors process,docker --docker-socket "${DOCKER_SOCK:?set DOCKER_SOCK}" --task-network host) ;;
  *) fail "unknown executor $EXEC" ;;
esac
AUTH=$RM_REGISTRY_AUTH ANON=$RM_REGISTRY_ANON
REG_FLAGS=(--registry-ca "$RM_REGISTRY_CA" --insecure-registry "$ANON")
SKOPEO=(skopeo --policy "$REGISTRY_DIR/policy.json")
# retag SRC DST: points lab/DST:v1 of the authenticated registry at lab/SRC:v1.
retag() {
  "${SKOPEO[@]}" copy -q --src-creds "lab:$RM_REGISTRY_PASSWORD" --dest-creds "lab:$RM_REGISTRY_PASSWORD" \
    --src-cert-dir "$RM_REGISTRY_CERT_DIR" --dest-cert-dir "$RM_REGISTRY_CERT_DIR" \
    "docker://$AUTH/lab/$1:v1" "docker://$AUTH/lab/$2:v1"
}
retag base moving  # as the fixture left it, whatever an earlier run did

start_server "${REG_FLAGS[@]}"
# The bomb's 3 GiB of zeros stop at --max-layer-size.
start_agent node-a "$PORTS" "$SANDBOXES" "${FLAGS[@]}" "${REG_FLAGS[@]}" --image-cache "$IMAGE_CACHE" \
  --max-layer-size 2Gi
await_nodes 1
alice_and_bob
rmc files put /usr/share/datasets/fashion-mnist datasets/fashion-mnist > /dev/null
pass "server and agent with $EXEC, the registries $AUTH (TLS, htpasswd) and $ANON (anonymous)"

# ---- 1. the login, sealed
echo "$RM_REGISTRY_PASSWORD" | as_alice registry login "$AUTH" -u "$RM_REGISTRY_USER" 2> /dev/null ||
  fail "registry login"
LS=$(as_alice registry ls --json)
[ "$(jq -r '.logins[0].registry' <<<"$LS")" = "$AUTH" ] || fail "registry ls: $LS"
grep -q "$RM_REGISTRY_PASSWORD" <<<"$LS" && fail "registry ls shows the password"
[ "$(as_bob registry ls --json | jq '.logins | length')" = 0 ] || fail "bob sees alice's login"
pass "alice's login to $AUTH is kept; ls shows it without its password, bob does not see it"

# ---- 2. Fashion-MNIST in lab/torch:v1, by tag
ID=$(jq -n --arg e "$EXEC" --arg i "$AUTH/lab/torch:v1" '{name: "fmnist-\($e)", kind: "distributed", replicas: 2,
  image: $i, executor: $e, resources: {cpu: 1, memory: "1Gi"}, inputs: [{from: "datasets/fashion-mnist", to: "data/"}],
  command: ["ringmaster-train", "--model", "lenet5", "--epochs", "2", "--batch-size", "64", "--lr", "0.05",
            "--threads", "1", "--source", "data", "--data-dir", "data", "--progress", "none"]}' |
  as_alice submit --no-workdir -)
PINNED=$(as_alice show "$ID" --json | jq -r .spec.image)
[ "$PINNED" = "$AUTH/lab/torch:v1@$RM_DIGEST_TORCH" ] || fail "job $ID is pinned to $PINNED, not $RM_DIGEST_TORCH"
as_alice show "$ID" | grep -q "$RM_DIGEST_TORCH" || fail "show does not say the digest"
as_alice wait "$ID" --timeout 540 > /dev/null ||
  { as_alice show "$ID"; as_alice logs "$ID" | tail -20; fail "job $ID did not succeed"; }
ACC=$(as_alice logs "$ID" | sed -n 's/^\[0\] final test accuracy //p')
awk -v a="${ACC:-0}" 'BEGIN { exit !(a >= 0.85) }' || fail "test accuracy \"$ACC\" < 0.85"
grep -q "started task .* with $EXEC (image $AUTH/lab/torch:v1@" "$DATA/agent-node-a.log" || fail "not run with $EXEC"
pass "$EXEC: 2-worker LeNet-5 in $AUTH/lab/torch:v1 (pinned to ${RM_DIGEST_TORCH:0:19}): test accuracy $ACC"

# The password is in no file of the server's or the agent's, and not in a task's environment.
ENV_JOB=$(jq -n --arg e "$EXEC" --arg i "$AUTH/lab/base:v1" '{name: "env", image: $i, executor: $e,
  resources: {cpu: 0.5, memory: "256Mi"}, command: ["sh", "-c", "env; cat /proc/1/environ | tr \"\\0\" \"\\n\""]}' |
  as_alice submit --no-workdir -)
as_alice wait "$ENV_JOB" --timeout 240 > /dev/null || { as_alice show "$ENV_JOB"; fail "env job did not succeed"; }
as_alice logs "$ENV_JOB" | grep -q "^\[0\] PATH=" || fail "the env job printed no environment"
as_alice logs "$ENV_JOB" | grep -q -- "$RM_REGISTRY_PASSWORD" && fail "the password is in a task's environment"
if grep -rlqs --binary-files=text -- "$RM_REGISTRY_PASSWORD" "$DATA"; then
  fail "the password is in $(grep -rls --binary-files=text -- "$RM_REGISTRY_PASSWORD" "$DATA" | head -3)"
fi
pass "the password is in no file under the server's and agent's data dirs and not in a task's environment"

# ---- 3. a moved tag
MOVE=$(jq -n --arg e "$EXEC" --arg i "$AUTH/lab/moving:v1" '{name: "moving", image: $i, executor: $e, max_restarts: 1,
  resources: {cpu: 0.5, memory: "256Mi"},
  command: ["sh", "-c", "test -e /opt/extra/README && echo SAW-THE-NEW-LAYER; echo attempt; sleep 3; exit 3"]}' |
  as_alice submit --no-workdir -)
PINNED=$(as_alice show "$MOVE" --json | jq -r .spec.image)
[ "$PINNED" = "$AUTH/lab/moving:v1@$RM_DIGEST_MOVING" ] || fail "moving job pinned to $PINNED"
retag base-plus moving
for _ in $(seq 1 600); do
  [ "$(as_alice show "$MOVE" --json | jq -r .state)" = FAILED ] && break
  sleep 0.2
done
[ "$(as_alice show "$MOVE" --json | jq -r .restarts)" -ge 1 ] || { as_alice show "$MOVE"; fail "job $MOVE did not restart"; }
[ "$(as_alice logs "$MOVE" | grep -c attempt)" -ge 2 ] || fail "job $MOVE did not run twice: $(as_alice logs "$MOVE")"
as_alice logs "$MOVE" | grep -q SAW-THE-NEW-LAYER && fail "a restart of job $MOVE ran the moved tag's image"
[ "$(as_alice show "$MOVE" --json | jq -r .spec.image)" = "$PINNED" ] || fail "job $MOVE's pin changed"
NEW=$(jq -n --arg e "$EXEC" --arg i "$AUTH/lab/moving:v1" '{name: "moved", image: $i, executor: $e,
  resources: {cpu: 0.5, memory: "256Mi"}, command: ["cat", "/opt/extra/README"]}' | as_alice submit --no-workdir -)
[ "$(as_alice show "$NEW" --json | jq -r .spec.image)" = "$AUTH/lab/moving:v1@$RM_DIGEST_BASE_PLUS" ] ||
  fail "a new job is not pinned to the moved tag"
as_alice wait "$NEW" --timeout 240 > /dev/null || { as_alice show "$NEW"; fail "job $NEW did not succeed"; }
retag base moving
pass "a tag moved after submit: job $MOVE's restart ran the pinned image; new job $NEW got the new one"

# ---- 4. credentials
# submit_error AS IMAGE: the submit's error (it must fail).
submit_error() {
  local as=$1 image=$2 out
  if out=$(jq -n --arg i "$image" '{name: "refused", image: $i, resources: {cpu: 0.5, memory: "64Mi"}, command: "true"}' |
    "$as" submit --no-workdir - 2>&1); then
    fail "a job on $image was accepted for $as: job $out"
  fi
  echo "$out"
}
ERR=$(submit_error as_bob "$AUTH/lab/torch:v1")
grep -q "$AUTH" <<<"$ERR" && grep -q 401 <<<"$ERR" || fail "bob without a login: $ERR"
ERR=$(submit_error as_bob "$AUTH/lab/torch@$RM_DIGEST_TORCH")
grep -q 401 <<<"$ERR" || fail "bob by digest: $ERR"
echo "wrong-password" | as_bob registry login "$AUTH" -u "$RM_REGISTRY_USER" 2> /dev/null
ERR=$(submit_error as_bob "$AUTH/lab/torch:v1")
grep -q "$AUTH" <<<"$ERR" && grep -q 401 <<<"$ERR" || fail "bob with a wrong password: $ERR"
pass "bob is refused at submit, without a login and with a wrong one: $ERR"
# alice's login goes bad between submit and start: the job fails, saying why.
rmc nodes cordon node-a --reason "registry test" 2> /dev/null
BAD=$(jq -n --arg e "$EXEC" --arg i "$AUTH/lab/torch-plus:v1" '{name: "stale-login", image: $i, executor: $e,
  resources: {cpu: 0.5, memory: "256Mi"}, command: "true"}' | as_alice submit --no-workdir -)
echo "no-longer-right" | as_alice registry login "$AUTH" -u "$RM_REGISTRY_USER" 2> /dev/null
rmc nodes uncordon node-a 2> /dev/null
for _ in $(seq 1 600); do
  case $(as_alice show "$BAD" --json | jq -r .state) in FAILED | SUCCEEDED) break ;; esac
  sleep 0.2
done
REASON=$(as_alice show "$BAD" --json | jq -r '.reason + " " + ([.tasks[].reason] | join(" "))')
[ "$(as_alice show "$BAD" --json | jq -r .state)" = FAILED ] || { as_alice show "$BAD"; fail "job $BAD did not fail"; }
grep -q "$AUTH" <<<"$REASON" && grep -q 401 <<<"$REASON" || fail "job $BAD failed for another reason: $REASON"
echo "$RM_REGISTRY_PASSWORD" | as_alice registry login "$AUTH" -u "$RM_REGISTRY_USER" 2> /dev/null
pass "alice's job $BAD, whose login went bad before it started, failed: $REASON"

if [ "$EXEC" = runc ]; then
  # ---- 5. bad images
  # start_error IMAGE REGEX: a job on IMAGE fails to start with a reason matching REGEX.
  start_error() {
    local id reason
    id=$(jq -n --arg i "$ANON/$1" '{name: "bad", image: $i, executor: "runc", resources: {cpu: 0.5, memory: "64Mi"},
      command: "true"}' | as_alice submit --no-workdir -)
    for _ in $(seq 1 900); do
      case $(as_alice show "$id" --json | jq -r .state) in FAILED | SUCCEEDED) break ;; esac
      sleep 0.2
    done
    reason=$(as_alice show "$id" --json | jq -r '[.tasks[].reason] | join(" ")')
    [ "$(as_alice show "$id" --json | jq -r .state)" = FAILED ] || fail "a job on $1 did not fail: $reason"
    # What the agent said of the layer, without the image's name (bad/device would match "device").
    grep -Eq -- "$2" <<<"${reason//$ANON\/$1/}" || fail "a job on $1 failed with \"$reason\", not /$2/"
    echo "$reason"
  }
  rm -f /tmp/pwned /escaped "$IMAGE_CACHE/escaped" "$IMAGE_CACHE/../escaped"
  pass "../: $(start_error bad/dotdot:v1 'escaped has a "\.\." component')"
  pass "symlink: $(start_error bad/symlink:v1 'esc/pwned goes through the symlink esc')"
  [ ! -e /tmp/pwned ] || fail "a layer wrote /tmp/pwned through a symlink"
  pass "device: $(start_error bad/device:v1 'dev/evil is a device node')"
  pass "hard link: $(start_error bad/hardlink:v1 'etc/shadow has a "\.\." component|hard link')"
  pass "bomb: $(start_error bad/bomb:v1 'unpacks to more than 2147483648 bytes')"
  pass "digest: $(start_error bad/digest:v1 'arrived with sha256:')"
  for f in /escaped "$IMAGE_CACHE/escaped" "$IMAGE_CACHE/../escaped" "$IMAGE_CACHE/layers/escaped"; do
    [ ! -e "$f" ] || fail "a layer wrote $f"
  done
  LEFT=$(find "$IMAGE_CACHE/layers" -maxdepth 2 -name "*.unpacking" | head -3)
  [ -z "$LEFT" ] || fail "half-unpacked layers left in the cache: $LEFT"
  # The cache still serves: a good image of the same registry runs.
  OK=$(jq -n --arg i "$ANON/lab/base:v1" '{name: "after-bad", image: $i, executor: "runc",
    resources: {cpu: 0.5, memory: "64Mi"}, command: "true"}' | as_alice submit --no-workdir -)
  as_alice wait "$OK" --timeout 120 > /dev/null || { as_alice show "$OK"; fail "a good image failed after the bad ones"; }
  pass "nothing was written outside the layer cache, no half layer is left in it, and it still serves"

  ERR=$(submit_error as_alice "$ANON/lab/nosuch:v1")
  grep -Eq "not found|404|unknown" <<<"$ERR" || fail "missing image: $ERR"
  pass "a missing image is refused at submit: $ERR"
  ERR=$(submit_error as_alice "$AUTH/lab/armonly:v1")
  grep -q "arm64" <<<"$ERR" || fail "an arm64-only image: $ERR"
  pass "an image only for another platform is refused at submit: $ERR"
  MULTI=$(jq -n --arg i "$AUTH/lab/multi:v1" '{name: "multi", image: $i, executor: "runc",
    resources: {cpu: 0.5, memory: "64Mi"}, command: "true"}' | as_alice submit --no-workdir -)
  [ "$(as_alice show "$MULTI" --json | jq -r .spec.image)" = "$AUTH/lab/multi:v1@$RM_DIGEST_MULTI_AMD64" ] ||
    fail "the index was not resolved to linux/amd64: $(as_alice show "$MULTI" --json | jq -r .spec.image)"
  as_alice wait "$MULTI" --timeout 120 > /dev/null || { as_alice show "$MULTI"; fail "job $MULTI did not succeed"; }
  pass "a two-platform index is pinned to its linux/amd64 manifest and runs"
  DOWN=$(free_port)
  ERR=$(submit_error as_alice "127.0.0.1:$DOWN/lab/base:v1")
  grep -q "127.0.0.1:$DOWN" <<<"$ERR" || fail "a registry that is down: $ERR"
  pass "a registry that is down is refused at submit: $ERR"
  SLOW=$(free_port)
  /usr/bin/python3 -c "import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', $SLOW)); s.listen(8); c=[s.accept() for _ in range(8)]; time.sleep(300)" &
  SLOW_PID=$!
  sleep 0.3
  START=$(date +%s)
  ERR=$(submit_error as_alice "127.0.0.1:$SLOW/lab/base:v1")
  grep -q "127.0.0.1:$SLOW" <<<"$ERR" || fail "a registry that never answers: $ERR"
  pass "a registry that never answers is refused at submit after $(( $(date +%s) - START )) s: $ERR"
fi
echo "registry_images_test ($EXEC): all passed"
