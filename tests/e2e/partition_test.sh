#!/usr/bin/env bash
# A network partition in a real multi-host cluster (scripts/cluster/up.sh:
# 3 hosts, the vxlan overlay, the torch image under runc):
#  1. a 2-worker training job runs on two hosts and checkpoints to the files
#     service; the underlay link of a worker's host (not the server's) is cut;
#  2. that host's agent, without the server for its fencing window (15 s here,
#     --node-lost-after), stops its task; a lease (10 s) later the server marks
#     the task LOST, and the gang restarts on the remaining hosts from its
#     checkpoint;
#  3. the link heals: the old agent comes back, its stale attempt stays
#     stopped and its late reports are refused; the job succeeds;
#  4. throughout, every host's processes and runc containers are sampled
#     (about every 0.3 s): at no sample do two copies of one rank run; no log line
#     of any attempt is duplicated.
source "$(dirname "$0")/lib.sh"
: "${IMAGES_DIR:?set IMAGES_DIR to the built images (tests/fixtures/images.sh)}"
CLUSTER=$DATA/cluster
NAME=cpart
chmod 0711 "$DATA"  # task users traverse it to their sandboxes
SAMPLER=""
down() {
  [ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null
  [ -f "$CLUSTER/name" ] && bash "$REPO/scripts/cluster/down.sh" --state "$CLUSTER"
}
trap 'rc=$?; set +e; down > /dev/null 2>&1; (exit $rc); cleanup' EXIT

IMAGE_CACHE=${IMAGE_CACHE:-$DATA/image-cache}
bash "$REPO/scripts/cluster/up.sh" 3 --network vxlan --name "$NAME" --state "$CLUSTER" --bin "$RM" \
  --image-cache "$IMAGE_CACHE" --agent-flags "--cpus 2 --memory 6Gi" --server-flags "--node-lost-after 15" > "$DATA/up.out" 2>&1 ||
  { cat "$DATA/up.out"; fail "up.sh 3 --network vxlan"; }
crm() { "$CLUSTER/rm" "$@"; }
crm files put /usr/share/datasets/fashion-mnist datasets/fashion-mnist > /dev/null
crm images push torch --from "$IMAGES_DIR" > /dev/null 2>&1 || fail "images push torch"
pass "3 hosts on vxlan, the torch image and Fashion-MNIST in the files service"

# cpu 2 of each host's 2: the two workers on two hosts, and room for the
# restarted gang on the two that remain.
ID=$(jq -n '{name: "partition", kind: "distributed", replicas: 2, max_restarts: 3, image: "torch",
  resources: {cpu: 2, memory: "1Gi"}, inputs: [{from: "datasets/fashion-mnist", to: "data/"}],
  command: ["ringmaster-train", "--model", "lenet5", "--epochs", "2", "--batch-size", "64", "--lr", "0.05",
            "--threads", "1", "--source", "data", "--data-dir", "data", "--checkpoint-every", "40", "--progress", "none"]}' |
  crm submit -)

# ---- the sampler: every host's processes and containers
RANK_OF_TASK=$(crm show "$ID" --json | jq -r '.tasks[] | "\(.id) \(.rank)"')
cat > "$DATA/sample.sh" <<SH
#!/usr/bin/env bash
# One line per sample: "<epoch ms> procs r0=<n> r1=<n> | containers r0=<n> r1=<n> | <pid:rank:attempt ...>"
declare -A TASK_RANK=()
while read -r t r; do TASK_RANK[\$t]=\$r; done <<'EOF2'
$RANK_OF_TASK
EOF2
while :; do
  declare -A P=() C=()
  seen=""
  for pid in \$(pgrep -x ringmaster-trai); do
    d=/proc/\$pid
    env=\$(tr '\0' '\n' < \$d/environ 2>/dev/null) || continue
    # This job of this cluster (other tests' jobs may have the same id).
    grep -qx "RINGMASTER_JOB_ID=$ID" <<<"\$env" && grep -q "^RINGMASTER_WORK_DIR=$CLUSTER/" <<<"\$env" || continue
    r=\$(sed -n 's/^RINGMASTER_RANK=//p' <<<"\$env"); a=\$(sed -n 's/^RINGMASTER_ATTEMPT=//p' <<<"\$env")
    P[\$r]=\$(( \${P[\$r]:-0} + 1 )); seen+=" \${d#/proc/}:\$r:\$a"
  done
  for root in $CLUSTER/h*/agent/runc; do
    [ -d "\$root" ] || continue
    while read -r id status; do
      [ "\$status" = running ] || continue
      key=\${id##*-}; t=\${key%%.*}
      r=\${TASK_RANK[\$t]:-}; [ -n "\$r" ] && C[\$r]=\$(( \${C[\$r]:-0} + 1 ))
    done < <(runc --root "\$root" list -f json 2>/dev/null | jq -r '.[]? | "\(.id) \(.status)"')
  done
  echo "\$(date +%s%3N) procs r0=\${P[0]:-0} r1=\${P[1]:-0} | containers r0=\${C[0]:-0} r1=\${C[1]:-0} |\$seen"
  unset P C
  sleep 0.3
done
SH
bash "$DATA/sample.sh" > "$DATA/samples" 2>/dev/null &
SAMPLER=$!

# ---- 1. a checkpoint, then cut the link of a worker's host (not the server's, h1)
for _ in $(seq 1 1800); do [ -n "$(crm files cat "jobs/$ID/checkpoints/latest" 2>/dev/null)" ] && break; sleep 0.1; done
CKPT=$(crm files cat "jobs/$ID/checkpoints/latest" 2>/dev/null | tr -d '\n')
[ -n "$CKPT" ] || { crm show "$ID"; crm logs "$ID" | tail; fail "job $ID uploaded no checkpoint in 180s"; }
SHOW=$(crm show "$ID" --json)
read -r RANK CUT <<<"$(jq -r '[.tasks[] | select(.node != "h1")][0] | "\(.rank) \(.node)"' <<<"$SHOW")"
[ -n "$CUT" ] && [ "$CUT" != null ] || fail "no worker off h1: $(jq -c '[.tasks[].node]' <<<"$SHOW")"
I=${CUT#h}
ip -n "$NAME-sw" link set "${NAME}b$I" down
CUT_AT=$(date +%s%3N)
pass "job $ID checkpointed ($CKPT); cut $CUT's link (rank $RANK there)"

# ---- 2. fencing on the cut host, LOST after the lease, a restart elsewhere
for _ in $(seq 1 400); do grep -q "no answer from the server" "$CLUSTER/$CUT/agent.log" && break; sleep 0.1; done
grep -q "no answer from the server .* stopped 1 tasks" "$CLUSTER/$CUT/agent.log" ||
  { tail -n 20 "$CLUSTER/$CUT/agent.log"; fail "$CUT's agent did not stop its task when cut off"; }
for _ in $(seq 1 600); do
  crm show "$ID" --json | jq -e --arg n "$CUT" '[.tasks[] | select(.node != $n and .attempt >= 2 and .state == "RUNNING")] | length == 2' > /dev/null && break
  sleep 0.2
done
SHOW=$(crm show "$ID" --json)
jq -e --arg n "$CUT" '[.tasks[] | select(.node != $n and .attempt >= 2 and .state == "RUNNING")] | length == 2' <<<"$SHOW" > /dev/null ||
  { crm show "$ID"; fail "the gang did not restart on the remaining hosts"; }
crm show "$ID" | grep -q "LOST" || { crm show "$ID"; fail "no task of job $ID was marked LOST"; }
pass "$CUT fenced its task; a lease later it was LOST and the gang runs again on $(jq -r '[.tasks[].node] | join(", ")' <<<"$SHOW")"

# ---- 3. heal: the old agent is back and stays fenced
ip -n "$NAME-sw" link set "${NAME}b$I" up
HEAL_AT=$(date +%s%3N)
for _ in $(seq 1 300); do crm nodes | grep -q "^[0-9]* *$CUT *ready" && break; sleep 0.1; done
crm nodes | grep -q "^[0-9]* *$CUT *ready" || { crm nodes; fail "$CUT did not come back after the heal"; }
crm wait "$ID" --timeout 600 > /dev/null || { crm show "$ID"; crm logs "$ID" | tail -20; fail "job $ID did not succeed after the partition"; }
LOGS=$(crm logs "$ID")
grep -q "^\[0\] resuming from .*ckpt-[0-9]* (step [1-9][0-9]*" <<<"$LOGS" || fail "the restarted gang did not resume from a checkpoint: $(head -20 <<<"$LOGS")"
ACC=$(sed -n 's/^\[0\] final test accuracy //p' <<<"$LOGS")
[ -n "$ACC" ] || fail "no final accuracy: $(tail -5 <<<"$LOGS")"
grep -q "the server answers again" "$CLUSTER/$CUT/agent.log" || fail "$CUT's agent did not reach the server again"
pass "the link healed; $CUT is ready again; job $ID resumed from its checkpoint and succeeded (accuracy $ACC)"

# ---- 4. never two copies of a rank; no duplicated log line
kill "$SAMPLER"; wait "$SAMPLER" 2>/dev/null || true; SAMPLER=""
N=$(wc -l < "$DATA/samples")
[ "$N" -gt 50 ] || fail "only $N samples taken"
BAD=$(grep -E "r[01]=([2-9]|[1-9][0-9])" "$DATA/samples" || true)
[ -z "$BAD" ] || fail "two copies of a rank at once: $(head -3 <<<"$BAD")"
# The cut-off copy ended before the gang restarted elsewhere: from the
# restart on, every sample shows one process and one container per rank at most.
grep -q "procs r0=1 r1=1 | containers r0=1 r1=1" "$DATA/samples" || fail "the sampler never saw both ranks run"
DUP=$(awk '
  /^\[[0-9]+\] --- attempt [0-9]+ ---$/ { r = $1; a[r] = $4; next }
  { r = substr($0, 1, index($0, "]")); key = r "|" (r in a ? a[r] : 1) "|" $0; if (seen[key]++) print }' <<<"$LOGS")
[ -z "$DUP" ] || fail "duplicated log lines: $(head -3 <<<"$DUP")"
pass "$N samples from cut to heal and after: never two copies of a rank, in processes or containers; no duplicated log line"
