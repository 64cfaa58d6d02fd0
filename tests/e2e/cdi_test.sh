#!/usr/bin/env bash
# GPUs in containers through CDI ($1: runc or docker), with a real server and
# agent whose node has two fake GPUs (the fake NVML, mknod'ed device nodes) and
# a CDI spec written the way `nvidia-ctk cdi generate` writes one: devices by
# index and by UUID, "all", and spec-wide edits over fakes of what a GPU host
# has (one more device node, nvidia-modeset; the driver's library, a file of
# our own; two hooks). A 1-GPU job in the base image then sees:
#  - the edits of its GPU's device named by UUID (NVML's, through --nvml);
#  - the spec's variable, and NVIDIA_VISIBLE_DEVICES=void as the spec sets it;
#  - the library, mounted read-only;
#  - nvidia-modeset and its own GPU usable (the device cgroup lets it through
#    to a device with no driver: ENXIO), the other GPU absent;
#  - (runc) its createContainer and startContainer hooks ran, for its container;
#  - (docker) no hooks ran, and the agent said so once.
# A broken spec beside it is reported in the agent's log and changes nothing;
# a spec rewritten without the job's GPU fails the next GPU job saying so.
source "$(dirname "$0")/lib.sh"
EXEC=${1:?usage: cdi_test.sh runc|docker}
: "${FAKE_NVML:?set FAKE_NVML to the fake libnvidia-ml}"
: "${IMAGES_DIR:?set IMAGES_DIR to the built images (tests/fixtures/images.sh)}"
IMAGE_CACHE=${IMAGE_CACHE:-$DATA/image-cache}
trap 'rc=$?; set +e; stop_agents; (exit $rc); cleanup' EXIT
case $EXEC in
  runc) PORTS=32620-32639 ;;
  docker) PORTS=32640-32659; : "${DOCKER_SOCK:?set DOCKER_SOCK to the socket of the test dockerd}" ;;
  *) fail "unknown executor $EXEC" ;;
esac

fake_gpus  # $TOOLS/dev/nvidia0, nvidia1, nvidiactl; NVML: GPU 0 is GPU-aaaa, GPU 1 GPU-bbbb
mkdir -p "$TOOLS/cdi-dev" "$TOOLS/cdi-lib" "$TOOLS/cdi-hooks" "$DATA/cdi"
mknod "$TOOLS/cdi-dev/nvidia-modeset" c 195 254
chmod 0666 "$TOOLS/cdi-dev/nvidia-modeset"
LIB_TEXT="fake libcuda $RANDOM$RANDOM"
echo "$LIB_TEXT" > "$TOOLS/cdi-lib/libcuda.so.535.104.05"  # writable by all: only the read-only mount stops a write
chmod 0755 "$TOOLS/cdi-dev" "$TOOLS/cdi-lib"
chmod 0666 "$TOOLS/cdi-lib/libcuda.so.535.104.05"
chmod 1777 "$TOOLS/cdi-hooks"
LIB=/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05

# gpu_device NAME INDEX HOW: one device of the spec, as nvidia-ctk names them,
# and (the test's own marker) CDI_FOUND_BY=HOW, which name the agent took.
gpu_device() {
  printf -- '- name: "%s"\n  containerEdits:\n    env: [CDI_FOUND_BY=%s]\n    deviceNodes:\n    - path: /dev/nvidia%s\n      hostPath: %s/dev/nvidia%s\n' \
    "$1" "$3" "$2" "$TOOLS" "$2"
}
# write_spec INDEX...: the node's spec, with the devices of these GPUs.
write_spec() {
  {
    printf 'cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n'
    for g in "$@"; do
      gpu_device "$g" "$g" index
      gpu_device "GPU-$([ "$g" = 0 ] && echo aaaa || echo bbbb)" "$g" uuid
    done
    printf -- '- name: all\n  containerEdits:\n    deviceNodes:\n'
    for g in "$@"; do printf '    - {path: /dev/nvidia%s, hostPath: %s/dev/nvidia%s}\n' "$g" "$TOOLS" "$g"; done
    cat <<YAML
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  - CDI_FAKE_DRIVER=535.104.05
  deviceNodes:
  - path: /dev/nvidiactl
    hostPath: $TOOLS/dev/nvidiactl
  - path: /dev/nvidia-modeset
    hostPath: $TOOLS/cdi-dev/nvidia-modeset
  mounts:
  - hostPath: $TOOLS/cdi-lib/libcuda.so.535.104.05
    containerPath: $LIB
    options: [ro, nosuid, nodev, bind]
  - hostPath: $TOOLS/cdi-hooks
    containerPath: /cdi-hooks
    options: [rw, nosuid, nodev, bind]
  hooks:
  - hookName: createContainer
    path: /bin/sh
    args: [sh, -c, 'cat > $TOOLS/cdi-hooks/createContainer.\$\$']
    env: [PATH=/usr/bin:/bin]
    timeout: 30
  - hookName: startContainer
    path: /bin/sh
    args: [sh, -c, 'cat > /cdi-hooks/startContainer.\$\$']
    env: [PATH=/usr/bin:/bin]
YAML
  } > "$DATA/cdi/nvidia.yaml.tmp"
  mv "$DATA/cdi/nvidia.yaml.tmp" "$DATA/cdi/nvidia.yaml"
}
write_spec 0 1
# Not valid CDI: the agent says so and goes on.
printf 'cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: [{name: "7", containerEdits: {env: [NOEQUALS]}}]\n' > "$DATA/cdi/broken.yaml"

start_server
rmc images push base --from "$IMAGES_DIR" > /dev/null 2>&1 || fail "images push base"
# NVML by --nvml (not on the library path): it gives the node its GPUs and their UUIDs.
FLAGS=(--executors "process,$EXEC" --gpu-devices "$TOOLS/dev" --image-cache "$IMAGE_CACHE" --cdi-spec-dirs "$DATA/cdi"
       --nvml "$DATA/nvml/libnvidia-ml.so.1")
# Docker cannot join a job's own network namespace: its tasks share the host's.
[ "$EXEC" = docker ] && FLAGS+=(--docker-socket "$DOCKER_SOCK" --task-network host)
start_agent node-a "$PORTS" "$SANDBOXES" "${FLAGS[@]}"
await_nodes 1
rmc nodes --json 2>/dev/null | jq -e '[.nodes[0].gpus[].uuid] == ["GPU-aaaa", "GPU-bbbb"]' > /dev/null ||
  { rmc nodes --json; fail "node-a does not offer the 2 fake GPUs found through --nvml"; }
LOG=$DATA/agent-node-a.log
grep -q "agent: CDI spec $DATA/cdi/nvidia.yaml: nvidia.com/gpu, 5 devices (cdiVersion 0.5.0)" "$LOG" ||
  fail "the agent did not say it loaded the spec: $(grep CDI "$LOG")"
grep -qF "agent: CDI: $DATA/cdi/broken.yaml: devices[0].containerEdits.env[0]: \"NOEQUALS\" is not NAME=VALUE (ignored)" "$LOG" ||
  fail "the broken spec was not reported: $(grep CDI "$LOG")"
pass "$EXEC: the agent loaded the CDI spec and reported the broken one"

PROBE='import errno, os
print("env", os.environ.get("CDI_FAKE_DRIVER"), os.environ.get("NVIDIA_VISIBLE_DEVICES"), os.environ.get("RINGMASTER_GPUS"))
print("found by", os.environ.get("CDI_FOUND_BY"))
print("lib", open(os.environ["LIB"]).read().strip())
try:
    open(os.environ["LIB"], "a"); print("lib writable")
except OSError as e:
    print("lib", "read-only" if e.errno == errno.EROFS else e.strerror)
g = int(os.environ["RINGMASTER_GPUS"])
for name in ("nvidia-modeset", "nvidiactl", "nvidia%d" % g, "nvidia%d" % (1 - g)):
    try:
        os.close(os.open("/dev/" + name, os.O_RDWR)); r = "opened"
    except OSError as e:
        r = {errno.ENXIO: "allowed", errno.EPERM: "denied", errno.ENOENT: "absent"}.get(e.errno, e.strerror)
    print(name.replace("nvidia%d" % g, "own-gpu").replace("nvidia%d" % (1 - g), "other-gpu"), r)'
submit_gpu() {
  jq -n --arg e "$EXEC" --arg p "$PROBE" --arg lib "$LIB" --argjson n "$1" '{name: "cdi", image: "base", executor: $e,
    command: ["python3", "-c", $p], env: {LIB: $lib}, resources: {cpu: 0.5, memory: "64Mi", gpu: $n}}' | rmc submit --no-workdir -
}
ID=$(submit_gpu 1)
rmc wait "$ID" --timeout 60 > /dev/null || { rmc show "$ID"; rmc logs "$ID"; fail "the CDI job failed"; }
KEY=$(task_key "$ID")
LOGS=$(rmc logs "$ID")
for want in "env 535.104.05 void [01]" "found by uuid" "lib $LIB_TEXT" "lib read-only" "nvidia-modeset allowed" "nvidiactl allowed" \
            "own-gpu allowed" "other-gpu absent"; do
  grep -qx "\[0\] $want" <<<"$LOGS" || fail "$EXEC: the task did not print \"$want\": $LOGS"
done
pass "$EXEC: the container got its GPU's device by UUID and saw the spec's variable, its read-only library, nvidia-modeset and its own GPU, not the other"

CREATED=$(grep -l "\"id\":\"rm-[^\"]*-$KEY\"" "$TOOLS"/cdi-hooks/createContainer.* 2>/dev/null || true)
STARTED=$(grep -l "\"id\":\"rm-[^\"]*-$KEY\"" "$TOOLS"/cdi-hooks/startContainer.* 2>/dev/null || true)
if [ "$EXEC" = runc ]; then
  [ -n "$CREATED" ] || fail "runc: the createContainer hook left no state of container $KEY: $(ls "$TOOLS/cdi-hooks")"
  [ -n "$STARTED" ] || fail "runc: the startContainer hook left no state of container $KEY: $(ls "$TOOLS/cdi-hooks")"
  pass "runc: the spec's createContainer and startContainer hooks ran for the task's container"
else
  [ -z "$CREATED$STARTED" ] || fail "docker: hooks ran? $CREATED $STARTED"
  [ "$(grep -c "nvidia.yaml: its 2 hooks .* do not run in docker containers" "$LOG")" = 1 ] ||
    fail "docker: the agent did not say once that the hooks are not run: $(grep CDI "$LOG")"
  pass "docker: no hook ran, and the agent said so once"
fi

# A spec regenerated without GPU 1: a job holding both GPUs fails, saying which is missing.
write_spec 0
ID=$(submit_gpu 2)
wait_state "$ID" FAILED 60
REASON=$(rmc show "$ID" --json | jq -r '.tasks[0].reason')
grep -q "CDI: no nvidia.com/gpu device for GPU 1 (GPU-bbbb) in the specs of $DATA/cdi" <<<"$REASON" ||
  fail "$EXEC: a job on a GPU the spec lacks: reason \"$REASON\""
pass "$EXEC: the re-read spec lacks GPU 1, and a 2-GPU job failed saying so"
echo "cdi_test ($EXEC): all passed"
