#!/usr/bin/env bash
# Tasks under one executor ($1: process, runc or docker), with a real server
# and agent whose node has two fake GPUs (the fake NVML, and device nodes
# mknod'ed as NVIDIA's: char 195:0, 195:1, nvidiactl 195:255):
#  1. limits: a task allocating 200 MiB under `memory: 64Mi` ends FAILED with
#     "out of memory (limit 64Mi)"; a busy loop under `cpu: 0.5` shows
#     throttling in its cgroup's cpu.stat while it runs (quota 50 ms per 100 ms);
#     two 1-GPU tasks that overlap see different GPUs: CUDA_VISIBLE_DEVICES,
#     and the other GPU's device refused (process: by the device cgroup;
#     containers: not in the container at all).
#  2. (containers) kill -9 of the agent while a container task runs, then a
#     new agent: the task is re-adopted (same attempt, no restart) and every
#     line it printed is in its log exactly once.
#  3. (containers) no new namespaces or mounts from inside (seccomp), and
#     cancel leaves nothing: no container in `docker ps -a` or
#     `runc list`, no overlay mount, no cgroup of the task.
source "$(dirname "$0")/lib.sh"
EXEC=${1:?usage: containers_test.sh process|runc|docker}
: "${FAKE_NVML:?set FAKE_NVML to the fake libnvidia-ml}"
IMAGE_CACHE=${IMAGE_CACHE:-$DATA/image-cache}
trap 'rc=$?; set +e; stop_agents; (exit $rc); cleanup' EXIT

case $EXEC in
  process) PORTS=32700-32719; EXECUTORS=process; PY=/usr/bin/python3 ;;
  runc) PORTS=32720-32739; EXECUTORS=process,runc; PY=python3 ;;
  docker) PORTS=32740-32759; EXECUTORS=process,docker; PY=python3
    : "${DOCKER_SOCK:?set DOCKER_SOCK to the socket of the test dockerd}" ;;
  *) fail "unknown executor $EXEC" ;;
esac
AGENT_FLAGS=(--executors "$EXECUTORS" --gpu-devices "$TOOLS/dev" --image-cache "$IMAGE_CACHE")
# Docker cannot join a job's own network namespace: its tasks share the host's.
[ "$EXEC" = docker ] && AGENT_FLAGS+=(--docker-socket "$DOCKER_SOCK" --task-network host)

fake_gpus

start_server
if [ "$EXEC" != process ]; then
  : "${IMAGES_DIR:?set IMAGES_DIR to the built images (tests/fixtures/images.sh)}"
  rmc images push base --from "$IMAGES_DIR" > /dev/null 2>&1 || fail "images push base"
fi
agent() { LD_LIBRARY_PATH=$DATA/nvml start_agent node-a "$PORTS" "$SANDBOXES" "${AGENT_FLAGS[@]}"; }
agent
await_nodes 1
rmc nodes --json 2>/dev/null | jq -e --arg e "$EXECUTORS" '.nodes[0].executors == $e and (.nodes[0].gpus | length) == 2' > /dev/null ||
  { rmc nodes --json; fail "node-a does not offer $EXECUTORS with 2 GPUs"; }
pass "node-a offers $EXECUTORS and 2 fake GPUs"

# spec JSON: the job under this test's executor (an image for containers).
spec() {
  jq -c --arg e "$EXEC" 'if $e == "process" then . else . + {image: "base", executor: $e} end' <<<"$1"
}
submit() { spec "$1" | rmc submit --no-workdir -; }

# ---- 1. limits
ID=$(submit "$(jq -n --arg py "$PY" '{name: "oom", command: [$py, "-c", "b = bytearray(200 * 2**20); print(len(b))"],
  resources: {cpu: 1, memory: "64Mi"}}')")
wait_state "$ID" FAILED 60
REASON=$(rmc show "$ID" --json | jq -r '.tasks[0].reason')
grep -q '^out of memory (limit 64Mi)' <<<"$REASON" || fail "oom: reason is \"$REASON\""
pass "$EXEC: 200 MiB under memory: 64Mi ends FAILED: $REASON"

ID=$(submit "$(jq -n --arg py "$PY" '{name: "busy", command: [$py, "-c",
  "import time\nt = time.time()\nwhile time.time() - t < 4: pass\nprint(\"done\")"], resources: {cpu: 0.5, memory: "64Mi"}}')")
wait_state "$ID" RUNNING 60
KEY=$(task_key "$ID")
CG=/sys/fs/cgroup/cpu/ringmaster/$(cat "$DATA/agent-node-a/sandbox-instance")/$KEY
[ "$(cat "$CG/cpu.cfs_quota_us")" = 50000 ] || fail "cpu: 0.5: quota is $(cat "$CG/cpu.cfs_quota_us"), not 50000 per 100000"
THROTTLED=0
for _ in $(seq 1 30); do
  THROTTLED=$(awk '$1 == "nr_throttled" {print $2}' "$CG/cpu.stat")
  [ "$THROTTLED" -gt 2 ] && break
  sleep 0.1
done
[ "$THROTTLED" -gt 2 ] || fail "cpu: 0.5: $CG/cpu.stat shows no throttling: $(cat "$CG/cpu.stat")"
wait_state "$ID" SUCCEEDED 60
# The agent releases a task (sandbox, container, cgroup) right after reporting its exit.
for _ in $(seq 1 100); do [ ! -e "$CG" ] && break; sleep 0.1; done
[ ! -e "$CG" ] || fail "the task's cgroup $CG outlived it by 10 s"
pass "$EXEC: cpu: 0.5 throttled $THROTTLED times in $KEY's cgroup; the cgroup is gone with the task"

# Each prints the GPU it was given and what it can open: "allowed" (ENXIO: the
# device cgroup let it through to a device with no driver), "denied" (EPERM)
# or "absent" (no such device node where it runs).
PROBE='import errno, os, time
dev = os.environ["GPU_DIR"]
print("gpus", os.environ.get("RINGMASTER_GPUS"), os.environ.get("NVIDIA_VISIBLE_DEVICES"))
print("cuda", os.environ.get("CUDA_VISIBLE_DEVICES"))
for i in (0, 1):
    path = "%s/nvidia%d" % (dev, i)
    try:
        os.close(os.open(path, os.O_RDWR)); r = "opened"
    except OSError as e:
        r = {errno.ENXIO: "allowed", errno.EPERM: "denied", errno.ENOENT: "absent"}.get(e.errno, e.strerror)
    print("nvidia%d" % i, r)
time.sleep(3)'
GPU_DIR=$TOOLS/dev
[ "$EXEC" != process ] && GPU_DIR=/dev
A=$(submit "$(jq -n --arg py "$PY" --arg p "$PROBE" --arg d "$GPU_DIR" '{name: "gpu-a", command: [$py, "-c", $p], env: {GPU_DIR: $d},
  resources: {cpu: 0.5, memory: "64Mi", gpu: 1}}')")
B=$(submit "$(jq -n --arg py "$PY" --arg p "$PROBE" --arg d "$GPU_DIR" '{name: "gpu-b", command: [$py, "-c", $p], env: {GPU_DIR: $d},
  resources: {cpu: 0.5, memory: "64Mi", gpu: 1}}')")
wait_state "$A" RUNNING 60
wait_state "$B" RUNNING 60
rmc wait "$A" --timeout 60 > /dev/null || { rmc logs "$A"; fail "gpu-a failed"; }
rmc wait "$B" --timeout 60 > /dev/null || { rmc logs "$B"; fail "gpu-b failed"; }
LA=$(rmc logs "$A"); LB=$(rmc logs "$B")
GA=$(sed -n 's/^\[0\] gpus \([01]\) \1$/\1/p' <<<"$LA"); GB=$(sed -n 's/^\[0\] gpus \([01]\) \1$/\1/p' <<<"$LB")
[ -n "$GA" ] && [ -n "$GB" ] && [ "$GA" != "$GB" ] || fail "two 1-GPU tasks were given \"$GA\" and \"$GB\": $LA / $LB"
# CUDA numbers what it can see: the node's GPUs for a process, only its own (as 0) in a container.
CA=$GA; CB=$GB
[ "$EXEC" != process ] && CA=0 && CB=0
grep -q "^\[0\] cuda $CA$" <<<"$LA" && grep -q "^\[0\] cuda $CB$" <<<"$LB" || fail "CUDA_VISIBLE_DEVICES: $LA / $LB"
OTHER=denied
[ "$EXEC" != process ] && OTHER=absent
for pair in "$GA:$LA" "$GB:$LB"; do
  g=${pair%%:*}; log=${pair#*:}; o=$((1 - g))
  grep -q "^\[0\] nvidia$g allowed$" <<<"$log" || fail "GPU $g's task cannot use its GPU: $log"
  grep -q "^\[0\] nvidia$o $OTHER$" <<<"$log" || fail "GPU $g's task: nvidia$o is not $OTHER: $log"
done
pass "$EXEC: two 1-GPU tasks got GPUs $GA and $GB, each its own device, the other $OTHER"

if [ "$EXEC" = process ]; then
  echo "containers_test ($EXEC): all passed"
  exit 0
fi

# ---- no new namespaces, no mounts: the container's seccomp profile refuses them
ID=$(submit '{"name": "escape", "command": ["python3", "-c",
  "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nfor name, flag in ((\"user\", 0x10000000), (\"mount\", 0x20000)):\n    r = libc.unshare(flag)\n    print(\"unshare\", name, \"refused\" if r != 0 else \"allowed\", os.strerror(ctypes.get_errno()) if r else \"\")\nprint(\"mount\", \"refused\" if libc.mount(b\"x\", b\"/tmp\", b\"tmpfs\", 0, None) != 0 else \"allowed\")"],
  "resources": {"cpu": 0.5, "memory": "64Mi"}}')
rmc wait "$ID" --timeout 60 > /dev/null || { rmc logs "$ID"; fail "the namespace probe failed"; }
LOGS=$(rmc logs "$ID")
[ "$(grep -c "refused" <<<"$LOGS")" = 3 ] || fail "$EXEC: a task could make namespaces or mount: $LOGS"
pass "$EXEC: unshare(user), unshare(mount) and mount(2) refused in the container"

# ---- 2. kill -9 of the agent while a container task runs
ID=$(submit '{"name": "count", "command": ["sh", "-c", "for i in $(seq 1 40); do echo line $i; sleep 0.25; done"],
  "resources": {"cpu": 0.5, "memory": "64Mi"}}')
wait_state "$ID" RUNNING 60
for _ in $(seq 1 50); do rmc logs "$ID" | grep -q 'line 8$' && break; sleep 0.1; done
KEY=$(task_key "$ID")
kill -KILL "${AGENT_PID[node-a]}"
wait "${AGENT_PID[node-a]}" 2>/dev/null || true
sleep 1
agent
rmc wait "$ID" --timeout 60 > /dev/null || { rmc show "$ID"; fail "job $ID did not succeed after the agent's restart"; }
[ "$(task_key "$ID")" = "$KEY" ] && [ "$(job_field "$ID" restarts)" = 0 ] ||
  fail "job $ID was restarted (task $(task_key "$ID"), was $KEY), not re-adopted"
DIFF=$(diff <(rmc logs "$ID" | sed 's/^\[0\] //') <(for i in $(seq 1 40); do echo "line $i"; done)) ||
  fail "job $ID's log is not each line exactly once: $DIFF"
pass "$EXEC: agent killed -9 mid-task; the new agent re-adopted $KEY and its 40 lines are each in the log once"

# ---- 3. cancel leaves nothing behind
ID=$(submit '{"name": "cancel-me", "command": ["sh", "-c", "echo up; sleep 600"], "resources": {"cpu": 0.5, "memory": "64Mi"}}')
wait_state "$ID" RUNNING 60
# RUNNING means the agent launched the task; `runc run` may still be making
# the container (runc list then says "container does not exist"). Its first
# line in the log means its process runs inside it.
for _ in $(seq 1 100); do rmc logs "$ID" | grep -q 'up$' && break; sleep 0.1; done
KEY=$(task_key "$ID")
if [ "$EXEC" = docker ]; then
  [ -n "$(docker -H "unix://$DOCKER_SOCK" ps -a -q --filter "label=ringmaster.job_id=$ID")" ] || fail "no container of job $ID"
else
  runc --root "$DATA/agent-node-a/runc" list | grep -q "$KEY" || fail "runc lists no container of job $ID"
fi
rmc cancel "$ID" > /dev/null
wait_state "$ID" CANCELLED 60
for _ in $(seq 1 50); do [ ! -e "$DATA/agent-node-a/tasks/$KEY" ] && break; sleep 0.1; done
if [ "$EXEC" = docker ]; then
  LEFT=$(docker -H "unix://$DOCKER_SOCK" ps -a -q --filter "label=ringmaster.job_id=$ID")
  [ -z "$LEFT" ] || fail "docker ps -a still shows job $ID's container $LEFT"
else
  LEFT=$(runc --root "$DATA/agent-node-a/runc" list -q)
  [ -z "$LEFT" ] || fail "runc list still shows $LEFT"
fi
! grep -q "$DATA/agent-node-a/tasks/$KEY" /proc/mounts || fail "the task's overlay is still mounted"
CG=/sys/fs/cgroup/memory/ringmaster/$(cat "$DATA/agent-node-a/sandbox-instance")/$KEY
for _ in $(seq 1 100); do [ ! -e "$CG" ] && break; sleep 0.1; done
[ ! -e "$CG" ] || fail "the task's cgroup is left"
pass "$EXEC: cancel left no container, mount or cgroup of job $ID"
echo "containers_test ($EXEC): all passed"
