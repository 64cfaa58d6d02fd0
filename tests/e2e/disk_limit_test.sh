#!/usr/bin/env bash
# A task's disk: resources.disk, enforced as the kubelet enforces ephemeral
# storage. One agent offering process and runc, whose data dir is a 96 MiB
# tmpfs (the node's own disk), with runc's upper dirs in --scratch-dir.
#  - a process task writing 200 MB into its work dir, past its 16Mi, is
#    stopped and FAILED with a reason naming its disk limit;
#  - a runc task writing 200 MB into its own root (its upper dir) gets no
#    further than its 16Mi file system and is FAILED the same way; the
#    agent's data dir has lost no room to it;
#  - a task beside them within its limit runs on and SUCCEEDED, and the node
#    stays ready and takes the next job.
# Needs root (mount, runc). Only loopback; ends only what it started.
source "$(dirname "$0")/lib.sh"
: "${IMAGES_DIR:?set IMAGES_DIR to the built images (tests/fixtures/images.sh)}"
IMAGE_CACHE=${IMAGE_CACHE:-$DATA/image-cache}
PORTS=33200-33219
NODE_DATA=$DATA/agent-node-a
mkdir -p "$NODE_DATA"
mount -t tmpfs -o size=96m,mode=0700 tmpfs "$NODE_DATA" || fail "cannot mount a tmpfs on $NODE_DATA (the test needs root)"
chmod 0711 "$DATA"  # tasks' uids enter their sandboxes below it
trap 'rc=$?; set +e; stop_agents
  [ $rc -ne 0 ] && [ -f "$DATA/agent-node-a.log" ] && { echo "---- agent log (last 30 lines)" >&2; tail -n 30 "$DATA/agent-node-a.log" >&2; }
  umount "$NODE_DATA" 2>/dev/null || umount -l "$NODE_DATA"
  (exit $rc); cleanup' EXIT

start_server
rmc images push base --from "$IMAGES_DIR" > /dev/null 2>&1 || fail "images push base"
start_agent node-a "$PORTS" "$SANDBOXES" --executors process,runc --image-cache "$IMAGE_CACHE" \
  --scratch-dir "$DATA/scratch" --default-task-disk 64Mi
await_nodes 1
avail() { df --output=avail -B1 "$NODE_DATA" | tail -n 1 | tr -d ' '; }
BEFORE=$(avail)

submit() { rmc submit --no-workdir -; }
# ---- a task within its limit, meant to outlive the others
STEADY=$(jq -n '{name: "steady", command: ["/bin/sh", "-c",
  "head -c 1000000 /dev/zero > \"$RINGMASTER_WORK_DIR/small\"; sleep 20; echo steady done"],
  resources: {cpu: 0.2, memory: "32Mi", disk: "32Mi"}}' | submit)
wait_state "$STEADY" RUNNING 60

# ---- a process task filling its work dir
FILL=$(jq -n '{name: "filler", command: ["/bin/sh", "-c",
  "head -c 200000000 /dev/zero > \"$RINGMASTER_WORK_DIR/fill\"; echo written; sleep 600"],
  resources: {cpu: 0.2, memory: "32Mi", disk: "16Mi"}}' | submit)
wait_state "$FILL" FAILED 60
REASON=$(rmc show "$FILL" --json | jq -r '.tasks[0].reason')
grep -q 'of its 16Mi disk limit' <<<"$REASON" || fail "filler: reason is \"$REASON\""
pass "a process task writing 200 MB past disk: 16Mi is FAILED: $REASON"

# ---- a runc task filling its own root
ROOT=$(jq -n '{name: "rootfill", image: "base", executor: "runc", command: ["/bin/sh", "-c",
  "head -c 200000000 /dev/zero > /tmp/fill; echo wrote $?; sleep 600"],
  resources: {cpu: 0.2, memory: "64Mi", disk: "16Mi"}}' | submit)
wait_state "$ROOT" FAILED 120
REASON=$(rmc show "$ROOT" --json | jq -r '.tasks[0].reason')
grep -q 'disk limit' <<<"$REASON" || fail "rootfill: reason is \"$REASON\""
AFTER=$(avail)
[ "$AFTER" -gt $((BEFORE - 8 * 1024 * 1024)) ] ||
  fail "the node's data dir lost $(( (BEFORE - AFTER) >> 20 )) MiB to a task's root: $(df -h "$NODE_DATA" | tail -n 1)"
pass "a runc task writing 200 MB into its root is FAILED: $REASON; the node's data dir has $((AFTER >> 20)) MiB free as before"
for _ in $(seq 1 100); do [ -z "$(ls -A "$DATA/scratch" 2>/dev/null)" ] && break; sleep 0.1; done  # released after its exit is reported
[ -z "$(ls -A "$DATA/scratch" 2>/dev/null)" ] || fail "scratch dir keeps $(ls -A "$DATA/scratch")"
pass "its upper dir's file system is gone with it"

# ---- the others are unaffected
wait_state "$STEADY" SUCCEEDED 60
rmc logs "$STEADY" | grep -q 'steady done' || fail "steady: no 'steady done' in its log"
rmc nodes | grep -q ' ready ' || { rmc nodes; fail "node-a is not ready"; }
NEXT=$(jq -n '{name: "next", command: ["/bin/sh", "-c", "echo next ran"], resources: {cpu: 0.2, memory: "16Mi"}}' | submit)
wait_state "$NEXT" SUCCEEDED 60
pass "the task beside them SUCCEEDED, node-a stays ready and ran job $NEXT"
