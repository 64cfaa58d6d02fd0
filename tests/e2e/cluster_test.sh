#!/usr/bin/env bash
# A real multi-host cluster on this machine (scripts/cluster/up.sh): three
# hosts, each a network namespace with its own link to a switch, the server
# on host 1, an agent on every host. A 3-worker job lands one worker per host
# and trains the 2-epoch Fashion-MNIST job (ringmaster-train, LeNet-5, ring
# all-reduce across the three hosts):
#   vxlan | ovs-gre   in the torch image under runc, the containers on the
#                     overlay: each rank's address is on it (10.244.<host>.*),
#                     and the ring runs between those addresses;
#   host              with the process executor on the hosts' own addresses.
# Then `down` leaves nothing: no namespace, link, daemon or process.
source "$(dirname "$0")/lib.sh"
MODE=${1:?usage: cluster_test.sh vxlan|ovs-gre|host}
CLUSTER=$DATA/cluster
chmod 0711 "$DATA"  # task users traverse it to their sandboxes
case $MODE in
  vxlan) NAME=cvx ;;
  ovs-gre) NAME=cgre ;;
  host) NAME=chost ;;
  *) fail "unknown network $MODE" ;;
esac
down() { [ -f "$CLUSTER/name" ] && bash "$REPO/scripts/cluster/down.sh" --state "$CLUSTER"; }
trap 'rc=$?; set +e; down > /dev/null 2>&1; (exit $rc); cleanup' EXIT

IMAGE_CACHE=${IMAGE_CACHE:-$DATA/image-cache}
bash "$REPO/scripts/cluster/up.sh" 3 --network "$MODE" --name "$NAME" --state "$CLUSTER" --bin "$RM" \
  --image-cache "$IMAGE_CACHE" --agent-flags "--cpus 2 --memory 6Gi" > "$DATA/up.out" 2>&1 ||
  { cat "$DATA/up.out"; fail "up.sh 3 --network $MODE"; }
crm() { "$CLUSTER/rm" "$@"; }
NODES=$(crm nodes)
[ "$(grep -c ' ready ' <<<"$NODES")" = 3 ] || fail "3 ready nodes expected: $NODES"
if [ "$MODE" != host ]; then
  for h in h1 h2 h3; do grep -q "^[0-9]* *$h .* $MODE 10\.244\.[0-9]*\.0/24" <<<"$NODES" || fail "$h has no $MODE block: $NODES"; done
fi
pass "3 hosts up ($MODE): $(grep -o '10.244.[0-9]*.0/24' <<<"$NODES" | tr '\n' ' ')"

crm files put /usr/share/datasets/fashion-mnist datasets/fashion-mnist > /dev/null
TRAIN=(ringmaster-train --model lenet5 --epochs 2 --batch-size 64 --lr 0.05 --threads 1 --source data --data-dir data
       --predict test --progress none)
CMD=$(printf '%s\n' "${TRAIN[@]}" | jq -R . | jq -sc .)
if [ "$MODE" = host ]; then
  # A process runs where it is submitted from unless told: into its work dir, where its inputs are.
  CMD=$(jq -c '["sh", "-c", "cd \"$RINGMASTER_WORK_DIR\" && exec \"$0\" \"$@\""] + .' <<<"$CMD")
  SPEC=$(jq -n '{name: "fmnist-3hosts", kind: "distributed", replicas: 3, resources: {cpu: 2, memory: "1Gi"},
    inputs: [{from: "datasets/fashion-mnist", to: "data/"}], command: $cmd}' --argjson cmd "$CMD")
else
  : "${IMAGES_DIR:?set IMAGES_DIR to the built images (tests/fixtures/images.sh)}"
  crm images push torch --from "$IMAGES_DIR" > /dev/null 2>&1 || fail "images push torch"
  SPEC=$(jq -n '{name: "fmnist-3hosts", kind: "distributed", replicas: 3, image: "torch",
    resources: {cpu: 2, memory: "1Gi"}, inputs: [{from: "datasets/fashion-mnist", to: "data/"}],
    command: $cmd}' --argjson cmd "$CMD")
fi
# cpu 2 of each host's 2: one worker per host.
ID=$(crm submit - <<<"$SPEC")
crm wait "$ID" --timeout 600 > /dev/null || { crm show "$ID"; crm logs "$ID" | tail -20; tail -n 20 "$CLUSTER"/h*/agent.log; fail "job $ID did not succeed"; }
SHOW=$(crm show "$ID" --json)
[ "$(jq -r '[.tasks[].node] | unique | length' <<<"$SHOW")" = 3 ] || fail "the workers did not land one per host: $(jq -c '[.tasks[].node]' <<<"$SHOW")"
ADDRS=$(jq -r '[.tasks[] | "\(.node)=\(.overlay_address)"] | join(" ")' <<<"$SHOW")
LOGS=$(crm logs "$ID")
ACC=$(sed -n 's/^\[0\] final test accuracy //p' <<<"$LOGS")
[ -n "$ACC" ] || fail "no final test accuracy in: $(tail -5 <<<"$LOGS")"
awk -v a="$ACC" 'BEGIN { exit !(a >= 0.85) }' || fail "test accuracy $ACC < 0.85"
if [ "$MODE" = host ]; then
  jq -e '[.tasks[].overlay_address] | all(. == "")' <<<"$SHOW" > /dev/null || fail "host network tasks got overlay addresses: $ADDRS"
  grep -q "started task .* with process" "$CLUSTER"/h2/agent.log || fail "h2 did not run its task as a process"
else
  # Each rank on its own host's block of the overlay.
  jq -e '[.tasks[] | .overlay_address | test("^10\\.244\\.[0-9]+\\.[0-9]+$")] | all' <<<"$SHOW" > /dev/null ||
    fail "tasks without overlay addresses: $ADDRS"
  [ "$(jq -r '[.tasks[].overlay_address | split(".")[2]] | unique | length' <<<"$SHOW")" = 3 ] || fail "three blocks expected: $ADDRS"
  grep -q "started task .* with runc (image torch@" "$CLUSTER"/h3/agent.log || fail "h3 did not run its task with runc"
  grep -q "$MODE overlay up" "$CLUSTER"/h3/agent.log || fail "h3's agent did not set up the $MODE overlay"
fi
if [ "$MODE" = vxlan ]; then
  # VXLAN is plain UDP: no unprivileged process on a host may send into the port
  # (it could inject frames as any container); the kernel's own tunnel still works (above).
  ERR=$("$CLUSTER/on" h2 setpriv --reuid 200999 --regid 200999 --clear-groups /usr/bin/python3 -c '
import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try: s.sendto(b"x" * 64, ("10.231.0.3", 4789)); print("sent")
except OSError as e: print(e.errno)' 2>&1)
  [ "$ERR" = 1 ] || fail "an unprivileged process on h2 could send to the VXLAN port: $ERR"
fi
OUT=$(crm files ls "jobs/$ID/outputs/")
grep -q predictions <<<"$OUT" || fail "no predictions in jobs/$ID/outputs/: $OUT"
pass "$MODE: 3 workers on 3 hosts ($ADDRS): test accuracy $ACC, predictions in jobs/$ID/outputs/"

# ---- down leaves nothing
PIDS=$(awk '{print $2}' "$CLUSTER/pids")
bash "$REPO/scripts/cluster/down.sh" --state "$CLUSTER" --keep-state > "$DATA/down.out" 2>&1 || { cat "$DATA/down.out"; fail "down.sh"; }
ip netns list | grep -E "^$NAME-" && fail "namespaces remain after down"
ip -o link show | grep -E ": ${NAME}[ab][0-9]+[@:]" && fail "links remain after down"
for p in $PIDS; do
  [ -d /proc/$p ] && [ "$(awk '{print $3}' /proc/$p/stat)" != Z ] && fail "pid $p ($(cat /proc/$p/comm)) still runs after down"
done
pgrep -f -- "$CLUSTER/" > /dev/null && { pgrep -af -- "$CLUSTER/"; fail "processes of the cluster remain after down"; }
if ls "$CLUSTER"/h*/agent/runc > /dev/null 2>&1; then
  for root in "$CLUSTER"/h*/agent/runc; do
    [ -z "$(runc --root "$root" list -q 2>/dev/null)" ] || fail "runc containers remain in $root"
  done
fi
rm -rf "$CLUSTER"
pass "down: no namespace, link, daemon, task or container of the cluster remains"
