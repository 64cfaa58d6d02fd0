#!/usr/bin/env bash
# Ring against parameter server with real frameworks, on emulated hosts.
#
# Every emulated host is a network namespace with its own hostname and IPC
# namespace (so no framework takes shared memory for a "remote" peer), one
# veth link to a bridge, shaped to RATE both ways with tc tbf (as
# bench/ring_vs_ps.sh). One worker per host; a parameter server (and MXNet's
# scheduler, TensorFlow's chief/coordinator) gets a host of its own, "hps",
# with its own link. Every framework trains the same two models with the same
# per-worker batch, one compute thread per worker, and is timed over the same
# number of steps after warm-up:
#   lenet5    LeNet-5 on 28x28 (61,706 parameters, 0.25 MB of gradients)
#   mlp-wide  784-1536-1536-10 (3,581,962 parameters, 14.3 MB)
# Frameworks (FRAMEWORKS, default all):
#   ringmaster-train  ring  src/train's trainer (real Fashion-MNIST batches)
#   ddp-ringmaster    ring  torch DDP on the `ringmaster` backend (ringcomm, tcp)
#   ddp-gloo          ring  torch DDP on gloo
#   horovod           ring  Horovod 0.28.1 over Gloo (build_horovod.sh), ranks started by hand
#   tf-ring           ring  TensorFlow MultiWorkerMirroredStrategy, RING collectives
#   tf-ps             PS    TensorFlow ParameterServerStrategy (async), 1 ps
#   mxnet-ps          PS    MXNet dist_sync kvstore, 1 server + 1 scheduler
# The Python frameworks train on a fixed synthetic batch. TensorFlow and MXNet
# run from the task images' root filesystems (IMAGES/{tensorflow,mxnet}.rootfs,
# chrooted, /opt/venv/bin/python3), so the versions are the images'; TF_PYTHON /
# MX_PYTHON instead name a python to run directly. A framework that is missing
# is reported as skipped.
#
# N = 1 is each framework's own single-worker training without any exchange
# (the baseline of scaling efficiency = throughput_N / (N x throughput_1)).
# Tables: bench/frameworks/table.py, with ringmaster-sim's prediction per row.
# Then, in the same run (SKIP_OTHERS=1 leaves them out): bench/pipeline/run
# (pipeline against data parallelism; PIPELINE_ARGS) and bench/containers_overhead
# (the same job under the process executor, runc and Docker; CONTAINERS_ARGS).
#
#   bench/frameworks/run.sh
#   FRAMEWORKS="ddp-gloo horovod" HOSTS="2 3" MODELS="lenet5 mlp-wide" RATE=1gbit BATCH=64
#   REPEATS=1 (runs per configuration, the best kept; N = 1 runs at least twice)
#   IMAGES=build/images  BUILD=build  TF_PYTHON=...  MX_PYTHON=...  RESULTS=file (keep the raw rows)  KEEP=1 (keep the logs)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
HERE=$REPO/bench/frameworks
BUILD=$(readlink -f "${BUILD:-build}")
IMAGES=$(readlink -f "${IMAGES:-build/images}")
FRAMEWORKS=${FRAMEWORKS:-"ringmaster-train ddp-ringmaster ddp-gloo horovod tf-ring tf-ps mxnet-ps"}
HOSTS=${HOSTS:-"2 3"}
MODELS=${MODELS:-"lenet5 mlp-wide"}
RATE=${RATE:-1gbit}
BATCH=${BATCH:-64}
REPEATS=${REPEATS:-1}
TAG=fw$$
SUBNET=10.213.78   # only inside the namespaces this script creates
PIDS=()
NAMESPACES=()
WORK=$(mktemp -d /tmp/fwbench.XXXXXX)

# Every process on_host starts is also listed in $WORK/pids: runs start them in
# a subshell (run_framework's output is captured), whose PIDS the trap never sees.
reap() {
  local p
  [ -f "$WORK/pids" ] || return 0
  while read -r p; do kill "$p" 2>/dev/null || true; done < "$WORK/pids"
  while read -r p; do while kill -0 "$p" 2>/dev/null; do sleep 0.1; done; done < "$WORK/pids"
  : > "$WORK/pids"
}

cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  reap
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  if [ -n "${KEEP:-}" ]; then echo "frameworks: logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || { echo "frameworks: needs root (network namespaces)" >&2; exit 2; }

steps_of() { [ "$1" = lenet5 ] && echo 100 || echo 50; }    # timed steps
warmup_of() { [ "$1" = lenet5 ] && echo 10 || echo 5; }

. bench/emulated_hosts.sh

make_hosts() {  # make_hosts N: switch namespace, hosts h0..h(N-1) (.1 ..) and hps (.100)
  local n=$1 i
  make_switch
  for ((i = 0; i < n; i++)); do add_host "$i" "$SUBNET.$((i + 1))"; done
  add_host ps "$SUBNET.100"
  # Every host resolves every host's name (on_host binds this over /etc/hosts).
  { echo "127.0.0.1 localhost"; for ((i = 0; i < n; i++)); do echo "$SUBNET.$((i + 1)) h$i"; done
    echo "$SUBNET.100 hps"; } > "$WORK/hosts"
}

addr() { [ "$1" = ps ] && echo "$SUBNET.100" || echo "$SUBNET.$(($1 + 1))"; }

# on_host HOST LOG [ROOTFS] -- CMD...: starts CMD in the background on emulated
# host HOST (0.. or ps), in its own UTS and IPC namespaces, chrooted into ROOTFS
# if given (with this directory at /mnt, and /proc, /dev, /sys), with every
# host's name in its /etc/hosts; the pid joins PIDS.
on_host() {
  local h=$1 log=$2 root=""
  shift 2
  [ "$1" = -- ] || { root=$1; shift; }
  shift
  ip netns exec "${TAG}h$h" unshare --uts --ipc --mount --propagation private sh -c '
    hostname "$1"; root=$2; src=$3; hosts=$4; shift 4
    if [ -n "$root" ]; then
      mount --bind "$src" "$root/mnt" && mount -t proc proc "$root/proc" && mount --rbind /dev "$root/dev" &&
        mount --rbind /sys "$root/sys" || exit 97
      [ ! -f "$root/etc/hosts" ] || mount --bind "$hosts" "$root/etc/hosts" || exit 97  # the workers there use addresses
      exec chroot "$root" "$@"
    fi
    mount --bind "$hosts" /etc/hosts || exit 97
    exec "$@"' sh "h$h" "$root" "$HERE" "$WORK/hosts" "$@" > "$log" 2>&1 &
  PIDS+=($!)
  LAST_PID=$!
  echo "$LAST_PID" >> "$WORK/pids"
}

# wait_workers TIMEOUT PID...: waits for the workers; 1 if any failed or ran past TIMEOUT seconds.
wait_workers() {
  local limit=$1 p failed=0 end=$((SECONDS + $1))
  shift
  for p in "$@"; do
    while kill -0 "$p" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.2; done
    if kill -0 "$p" 2>/dev/null; then kill "$p" 2>/dev/null; failed=1; fi
    wait "$p" 2>/dev/null || failed=1
  done
  [ $failed = 0 ] || echo "(a worker failed or ran past ${limit}s)" >&2
  return $failed
}

stop_servers() { local p; for p in "$@"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }

# python_of IMAGE DIRECT: sets PY_PREFIX to "--" (run DIRECT, a python) or to
# "ROOTFS --" (the image's /opt/venv/bin/python3, chrooted), and PY_BIN; PY_PREFIX
# is empty if neither is there.
python_of() {
  local image=$1 direct=$2
  PY_PREFIX="" PY_BIN=""
  if [ -n "$direct" ]; then PY_PREFIX="--" PY_BIN=$direct
  elif [ -f "$IMAGES/$image.rootfs.ok" ] && [ -x "$IMAGES/$image.rootfs/opt/venv/bin/python3" ]; then
    PY_PREFIX="$IMAGES/$image.rootfs --" PY_BIN=/opt/venv/bin/python3
  fi
}
script_dir() { [ "$PY_PREFIX" = "--" ] && echo "$HERE" || echo /mnt; }  # where the workers are, as it sees them

. "$HERE/runners.sh"

RESULTS=${RESULTS:-$WORK/results}
: > "$RESULTS"
[ -x "$BUILD/src/train/ringmaster-train" ] || echo "frameworks: $BUILD/src/train/ringmaster-train not built: ringmaster-train skipped" >&2
echo "frameworks: $FRAMEWORKS; hosts 1 $HOSTS; models $MODELS; $RATE links; batch $BATCH per worker" >&2
versions() {  # versions IMAGE: what the image's venv holds, or the python run instead
  local root=$IMAGES/$1.rootfs
  [ -n "${2:-}" ] && { echo "$1: $2"; return; }
  [ -d "$root/opt/venv" ] || { echo "$1: no image"; return; }
  echo "$1 image: $(find "$root"/opt/venv/lib/python3*/site-packages -maxdepth 1 -name '*.dist-info' -printf '%f\n' |
    grep -E '^(tensorflow|keras|mxnet|numpy)' | sed 's/.dist-info//' | sort | tr '\n' ' ')"
}
{
  echo "torch: $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') (/usr/bin/python3);" \
    "horovod: $(PYTHONPATH=$BUILD/bench/horovod/site /usr/bin/python3 -c 'import horovod; print(horovod.__version__)' 2>/dev/null || echo not built)"
  versions tensorflow "${TF_PYTHON:-}"
  versions mxnet "${MX_PYTHON:-}"
} >&2
start_all=$SECONDS
for n in 1 $HOSTS; do
  make_hosts "$n"
  for model in $MODELS; do
    for fw in $FRAMEWORKS; do
      t0=$SECONDS
      err=$WORK/err.$fw.$model.$n
      line="" reps=$REPEATS
      [ "$n" = 1 ] && [ "$reps" -lt 2 ] && reps=2  # every efficiency divides by it
      for ((r = 0; r < reps; r++)); do
        got=$(run_framework "$fw" "$model" "$n" 2>> "$err") || true
        reap  # what a failed run left running
        # The best of the repeats: the machine's other work only ever slows a run down.
        [ -n "$got" ] && { [ -z "$line" ] || awk -v a="$got" -v b="$line" 'BEGIN { exit !(a + 0 > b + 0) }'; } && line=$got
      done
      if [ -z "$line" ]; then
        echo "frameworks: $fw $model N=$n: no result: $(tail -c 600 "$err" | tr '\n' ' ')" >&2
        continue
      fi
      echo "$fw $model $n $line" >> "$RESULTS"
      echo "  $fw $model N=$n: $line ($((SECONDS - t0)) s)" >&2
    done
  done
  drop_hosts
done
echo "frameworks: all runs took $((SECONDS - start_all)) s" >&2
/usr/bin/python3 "$HERE/table.py" --results "$RESULTS" --rate "$RATE" --batch "$BATCH" --sim "$BUILD/src/sim/ringmaster-sim"

# The other experiments of the same comparison, in the same run (SKIP_OTHERS=1
# leaves them out): model against data parallelism, and host against container.
if [ "${SKIP_OTHERS:-0}" != 1 ]; then
  echo
  bench/pipeline/run --build "$BUILD" ${PIPELINE_ARGS:-}
  echo
  bench/containers_overhead --build "$BUILD" ${CONTAINERS_ARGS:-}
fi
