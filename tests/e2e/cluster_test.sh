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
#                     Then a notebook (kind: dev) on host 3 answers through
#                     the server's proxy on host 1.
# On the overlays a probe container checks it cannot reach the server, open a
# raw socket, or get a broadcast into a host's stack; on vxlan, that no
# unprivileged process on a host may send to the VXLAN port.
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
if [ "$MODE" != host ]; then
  # A container on the overlay, as a hostile user would try it: no route to the
  # server or the hosts, no raw sockets (no spoofing), and a broadcast forced out
  # of its eth0 reaches no host's stack (the bridge's INPUT drop counts it).
  PROBE=$(jq -n '{name: "probe", image: "torch", resources: {cpu: 1, memory: "256Mi"}, command: ["python3", "-c",
"import socket\ndef t(name, f):\n  try:\n    f(); print(name, \"open\")\n  except OSError as e:\n    print(name, \"blocked\", e.errno)\n
def tcp():\n  s = socket.socket(); s.settimeout(2); s.connect((\"10.231.0.1\", 8443))\n
def bcast():\n  s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n  s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)\n  s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b\"eth0\")\n  [s.sendto(b\"x\" * 100, (\"255.255.255.255\", 4789)) for _ in range(3)]\n
t(\"server\", tcp)\nt(\"raw\", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))\nt(\"broadcast\", bcast)\n"]}')
  PID_=$(crm submit - <<<"$PROBE")
  crm wait "$PID_" --timeout 120 > /dev/null || { crm logs "$PID_"; fail "the probe job failed"; }
  PLOG=$(crm logs "$PID_")
  grep -q "server blocked 101" <<<"$PLOG" || fail "an overlay container reached the server: $PLOG"
  grep -q "raw blocked 1" <<<"$PLOG" || fail "an overlay container opened a raw socket: $PLOG"
  grep -q "broadcast open" <<<"$PLOG" || fail "the probe's broadcast was not sent: $PLOG"
  if [ "$MODE" = vxlan ]; then
    DROPS=0
    for h in h1 h2 h3; do
      DROPS=$((DROPS + $("$CLUSTER/on" $h iptables -L INPUT -v -n -x | awk '$3 == "DROP" && $6 == "rmbr0" {print $1}')))
    done
    [ "$DROPS" -gt 0 ] || fail "no host's INPUT drop on rmbr0 saw the container's broadcast"
  fi
  pass "$MODE: an overlay container cannot reach the server (ENETUNREACH) or open raw sockets; its broadcasts stop at the bridge"
fi
# ---- A job's network is its own: alice's 2-worker job (rank 0 listening at
# MASTER_PORT, rank 1 connected to it) on two hosts; bob's task on the third
# host cannot connect to her MASTER_ADDR:MASTER_PORT.
crm users create alice > /dev/null 2>&1; crm users create bob > /dev/null 2>&1
ALICE=$(crm tokens create --user alice) BOB=$(crm tokens create --user bob)
[ "$MODE" = host ] && IMG='{}' || IMG='{"image": "torch"}'
ALICE_JOB=$(jq -n --argjson img "$IMG" '$img + {name: "alice-rdzv", kind: "distributed", replicas: 2,
  resources: {cpu: 2, memory: "256Mi"}, command: ["python3", "-c",
"import os, socket, time\naddr, port = os.environ[\"MASTER_ADDR\"], int(os.environ[\"MASTER_PORT\"])\nif os.environ[\"RANK\"] == \"0\":\n  s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"0.0.0.0\", port)); s.listen(8); s.settimeout(1)\n  end = time.time() + 60\n  while time.time() < end:\n    try:\n      c, a = s.accept(); print(\"accepted\", a[0], flush=True)\n    except OSError:\n      pass\nelse:\n  for _ in range(300):\n    try:\n      socket.create_connection((addr, port), 1); print(\"connected\", flush=True); break\n    except OSError:\n      time.sleep(0.2)\n  time.sleep(60)\n"]}' |
  RINGMASTER_TOKEN=$ALICE crm submit --no-workdir -)
for _ in $(seq 1 600); do RINGMASTER_TOKEN=$ALICE crm logs "$ALICE_JOB" 2>/dev/null | grep -q '^\[1\] connected' && break; sleep 0.1; done
RINGMASTER_TOKEN=$ALICE crm logs "$ALICE_JOB" | grep -q '^\[1\] connected' ||
  { crm show "$ALICE_JOB"; crm logs "$ALICE_JOB" | tail; fail "alice's rank 1 did not reach her rank 0's MASTER_PORT"; }
ASHOW=$(crm show "$ALICE_JOB" --json)
R0NODE=$(jq -r '.tasks[] | select(.rank == 0) | .node' <<<"$ASHOW")
if [ "$MODE" = host ]; then TARGET=10.231.0.${R0NODE#h}; else TARGET=$(jq -r '.tasks[] | select(.rank == 0) | .overlay_address' <<<"$ASHOW"); fi
TPORT=$(jq -r '.tasks[] | select(.rank == 0) | .port' <<<"$ASHOW")
BOB_JOB=$(jq -n --argjson img "$IMG" --arg t "$TARGET" --argjson p "$TPORT" '$img + {name: "bob-probe",
  resources: {cpu: 2, memory: "256Mi"}, command: ["python3", "-c",
"import socket, sys\ntry:\n  socket.create_connection((sys.argv[1], int(sys.argv[2])), 3); print(\"CONNECTED\")\nexcept OSError as e:\n  print(\"blocked\", e)\n", $t, ($p | tostring)]}' |
  RINGMASTER_TOKEN=$BOB crm submit --no-workdir -)
crm wait "$BOB_JOB" --timeout 120 > /dev/null || { crm logs "$BOB_JOB"; fail "bob's probe failed"; }
BNODE=$(crm show "$BOB_JOB" --json | jq -r '.tasks[0].node')
[ "$(jq -r --arg n "$BNODE" '[.tasks[] | select(.node == $n)] | length' <<<"$ASHOW")" = 0 ] ||
  fail "bob's probe ran on $BNODE, beside alice's job"
BLOG=$(crm logs "$BOB_JOB")
grep -q '^\[0\] blocked' <<<"$BLOG" || fail "bob's task on $BNODE reached alice's MASTER_PORT at $TARGET:$TPORT: $BLOG"
crm cancel "$ALICE_JOB" > /dev/null
ALOG=$(crm logs "$ALICE_JOB")
[ "$(grep -c '^\[0\] accepted' <<<"$ALOG")" -ge 1 ] || fail "alice's rank 0 accepted nothing: $ALOG"
pass "$MODE: bob's task on $BNODE cannot connect to alice's MASTER_PORT ($TARGET:$TPORT); her ranks reach each other"
if [ "$MODE" = host ]; then
  # A notebook (kind: dev, the process executor) on host 3, reached through the
  # server on host 1: the server's proxy -> h3's agent tunnel -> the notebook's socket.
  crm nodes cordon h1 > /dev/null && crm nodes cordon h2 > /dev/null
  NB=$(crm submit --no-workdir - <<<'{"name": "nb-h3", "kind": "dev", "resources": {"cpu": 1, "memory": "1Gi"}}')
  for _ in $(seq 1 600); do [ "$(crm show "$NB" --json | jq -r .state)" = RUNNING ] && break; sleep 0.1; done
  [ "$(crm show "$NB" --json | jq -r .state)" = RUNNING ] || { crm show "$NB"; fail "the notebook job did not start"; }
  crm nodes uncordon h1 > /dev/null && crm nodes uncordon h2 > /dev/null
  [ "$(crm show "$NB" --json | jq -r '.tasks[0].node')" = h3 ] || fail "the notebook is not on h3: $(crm show "$NB" --json | jq -c .tasks)"
  LAB=$(crm dev open "$NB")
  case $LAB in https://*/jobs/"$NB"/lab/) ;; *) fail "dev open printed '$LAB'" ;; esac
  lab() { "$CLUSTER/on" h1 curl -s --cacert "$CLUSTER/server/tls/ca.crt" "$@"; }
  ADMIN=$(cat "$CLUSTER/server/admin.token")
  for _ in $(seq 1 600); do
    [ "$(lab -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $ADMIN" "${LAB}tree")" = 200 ] && break
    sleep 0.1
  done
  page=$(lab -H "Authorization: Bearer $ADMIN" "${LAB}tree")
  grep -q "<title>Home Page - Select or create a notebook</title>" <<<"$page" ||
    { tail -n 20 "$CLUSTER"/h3/agent.log; fail "no notebook page from h3 through h1: ${page:0:300}"; }
  [ "$(lab -o /dev/null -w '%{http_code}' "${LAB}tree")" = 401 ] || fail "the notebook answered without credentials"
  crm cancel "$NB" > /dev/null
  pass "host: a notebook on h3 answers through the server's proxy on h1 ($LAB)"
fi
OUT=$(crm files ls "jobs/$ID/outputs/")
grep -q predictions <<<"$OUT" || fail "no predictions in jobs/$ID/outputs/: $OUT"
pass "$MODE: 3 workers on 3 hosts ($ADDRS): test accuracy $ACC, predictions in jobs/$ID/outputs/"

# ---- down leaves nothing
# Each daemon by its pid and start time (procs.sh): a pid the kernel gave to
# another process since is not the cluster's, and a process is judged on one
# read of its /proc/PID/stat, so one that exits meanwhile is gone, not a failure.
source "$REPO/scripts/cluster/procs.sh"
RECORDED=$(cat "$CLUSTER/pids")
bash "$REPO/scripts/cluster/down.sh" --state "$CLUSTER" --keep-state > "$DATA/down.out" 2>&1 || { cat "$DATA/down.out"; fail "down.sh"; }
ip netns list | grep -E "^$NAME-" && fail "namespaces remain after down"
ip -o link show | grep -E ": ${NAME}[ab][0-9]+[@:]" && fail "links remain after down"
while read -r what pid start; do
  [ -n "$start" ] || fail "up.sh recorded no start time for $what (pid $pid)"
  if proc_running "$pid" "$start"; then fail "$what (pid $pid, started at tick $start) still runs after down"; fi
done <<< "$RECORDED"
pgrep -f -- "$CLUSTER/" > /dev/null && { pgrep -af -- "$CLUSTER/"; fail "processes of the cluster remain after down"; }
if ls "$CLUSTER"/h*/agent/runc > /dev/null 2>&1; then
  for root in "$CLUSTER"/h*/agent/runc; do
    [ -z "$(runc --root "$root" list -q 2>/dev/null)" ] || fail "runc containers remain in $root"
  done
fi
rm -rf "$CLUSTER"
pass "down: no namespace, link, daemon, task or container of the cluster remains"
