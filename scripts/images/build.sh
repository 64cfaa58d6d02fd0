#!/usr/bin/env bash
# Builds a framework image for Ringmaster tasks from Debian packages, with no
# container registry: mmdebstrap (minbase, no recommends, no docs/man/locales)
# from the host's apt mirror, then the image's extras, checked in a chroot.
#
#   build.sh [--reuse-rootfs] NAME OUTDIR
#     NAME: base | torch | tfjs | tensorflow | mxnet
#
# Writes into OUTDIR:
#   NAME.tar      the rootfs as an uncompressed tar (./usr/bin/python3, ...),
#                 sorted, numeric owners; `docker import` takes it as is
#   NAME.json     {"name","digest":"sha256:<hex of NAME.tar>","size","packages",
#                 "built_at","env","entrypoint","cmd"}; written last, so an
#                 image is complete only when NAME.json names NAME.tar's size
#   NAME.rootfs/  the unpacked rootfs (what runc can use directly), kept so that
#                 --reuse-rootfs can skip mmdebstrap (NAME.rootfs.ok marks it
#                 complete and lists its packages)
#   NAME.mmdebstrap.log, apt-cache/ (downloaded .debs, shared by the images:
#                 reruns download nothing), npm-cache/ and tfjs.npm/ (tfjs),
#                 pip-cache/ (the wheels of tensorflow and mxnet)
# torch bakes in the Ringmaster runtime: ringmaster-train ($RM_TRAIN_BIN,
# default build/src/train/ringmaster-train, installed: <prefix>/bin) in
# /opt/ringmaster/bin and the ringmaster_torch package ($RM_TORCH_PY, default
# build/python/ringmaster_torch, installed: <prefix>/lib/ringmaster/python)
# in /opt/ringmaster/python. tfjs installs TensorFlow.js with the host's npm
# into /opt/tfjs/node_modules (the image's Debian nodejs 18 loads it).
# tensorflow and mxnet are a virtual environment, /opt/venv (first on the
# image's PATH: a task's python3 is the venv's), over Debian's python3 3.11,
# holding exactly the wheels of scripts/images/requirements/NAME.txt (pinned
# with their sha256, scripts/images/lock.sh writes them): the host's pip
# downloads them into OUTDIR/pip-cache (skipped when all are there), the
# image's pip installs them offline with --require-hashes --no-deps.
# --reuse-rootfs: keep NAME.rootfs/ when it holds the same package list and
# only redo the extras, the checks and the tar (seconds instead of minutes).
# Set SOURCE_DATE_EPOCH to clamp mtimes. Needs root, mmdebstrap, jq (npm: tfjs;
# python3 with pip: tensorflow, mxnet).
# shellcheck disable=SC2016  # single-quoted $1 and ${Package} are for mmdebstrap, sh and dpkg-query
set -euo pipefail

die() { echo "images: ${NAME:-?}: $*" >&2; exit 1; }
say() { echo "images: $NAME: $*" >&2; }

REUSE=0
if [ "${1:-}" = --reuse-rootfs ]; then REUSE=1; shift; fi
[ $# -eq 2 ] || { echo "usage: build.sh [--reuse-rootfs] base|torch|tfjs|tensorflow|mxnet OUTDIR" >&2; exit 2; }
NAME=$1
OUT=$2
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TFJS_VERSION=4.22.0
DEFAULT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

case $NAME in
  base)
    PACKAGES=(python3 ca-certificates)
    ENV=("PATH=$DEFAULT_PATH" LANG=C.UTF-8)
    CMD=(python3) ;;
  torch)
    # libfmt9, libargon2-1: ringmaster-train's libraries that python3-torch
    # (libtorch1.13) does not bring (argon2 comes with the common crypto that
    # ringcomm's job-secret proofs use).
    # libopenblas0-openmp: libtorch's BLAS. Without it (no recommends) the
    # image's libblas.so.3 is the reference BLAS: a matmul 20x slower, and
    # LeNet-5 trained at half the host's speed (bench/containers_overhead).
    PACKAGES=(python3 python3-torch python3-numpy libfmt9 libargon2-1 libopenblas0-openmp ca-certificates)
    ENV=("PATH=/opt/ringmaster/bin:$DEFAULT_PATH" LANG=C.UTF-8 PYTHONPATH=/opt/ringmaster/python)
    CMD=(python3) ;;
  tfjs)
    PACKAGES=(nodejs python3 ca-certificates)
    ENV=("PATH=$DEFAULT_PATH" LANG=C.UTF-8 NODE_PATH=/opt/tfjs/node_modules)
    CMD=(node) ;;
  tensorflow|mxnet)
    # python3-venv: the venv and its pip (Debian's wheels of pip and setuptools).
    # libgomp1, libquadmath0: what mxnet's libmxnet.so and its bundled
    # libgfortran load and its wheel lacks (OpenMP, quad-precision math).
    PACKAGES=(python3 python3-venv ca-certificates)
    [ "$NAME" = mxnet ] && PACKAGES+=(libgomp1 libquadmath0)
    ENV=("PATH=/opt/venv/bin:$DEFAULT_PATH" LANG=C.UTF-8 VIRTUAL_ENV=/opt/venv)
    CMD=(python3) ;;
  *) die "unknown image (expected base, torch, tfjs, tensorflow or mxnet)" ;;
esac
REQUIREMENTS=$REPO/scripts/images/requirements/$NAME.txt

[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap --mode=root, chroot)"
for tool in mmdebstrap jq sha256sum unshare; do
  command -v "$tool" > /dev/null || die "$tool is missing"
done
if [ "$NAME" = torch ]; then
  if [ -f "$REPO/CMakeLists.txt" ]; then  # a checkout: the build's
    TRAIN_BIN=${RM_TRAIN_BIN:-$REPO/build/src/train/ringmaster-train}
    TORCH_PY=${RM_TORCH_PY:-$REPO/build/python/ringmaster_torch}
  else  # installed as <prefix>/lib/ringmaster/scripts/images/build.sh: the package ringmaster-torch's
    TRAIN_BIN=${RM_TRAIN_BIN:-$(dirname "$(dirname "$REPO")")/bin/ringmaster-train}
    TORCH_PY=${RM_TORCH_PY:-$REPO/python/ringmaster_torch}
  fi
  [ -x "$TRAIN_BIN" ] || die "ringmaster-train not found at $TRAIN_BIN (build it, or set RM_TRAIN_BIN)"
  [ -f "$TORCH_PY/__init__.py" ] || die "ringmaster_torch not found at $TORCH_PY (build it, or set RM_TORCH_PY)"
fi
if [ "$NAME" = tfjs ]; then command -v npm > /dev/null || die "npm is missing (the host's npm installs TensorFlow.js)"; fi
if [ "$NAME" = tensorflow ] || [ "$NAME" = mxnet ]; then
  [ -f "$REQUIREMENTS" ] || die "$REQUIREMENTS is missing"
  python3 -m pip --version > /dev/null 2>&1 || die "python3 -m pip does not run (the host's pip downloads the wheels; Debian: python3-pip)"
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$OUT/$NAME.rootfs
STAMP=$OUT/$NAME.rootfs.ok
LOG=$OUT/$NAME.mmdebstrap.log

# The host's apt sources, read as the recipes read them: the first URIs: of
# debian.sources (else the first deb line of sources.list) is the mirror; the
# -updates and -security suites are added when the host has them.
apt_sources() {
  local f=/etc/apt/sources.list.d/debian.sources mirror="" sec="" updates=0
  if [ -f "$f" ]; then
    mirror=$(awk '/^URIs:/{print $2; exit}' "$f")
    sec=$(awk '/^URIs:/{u=$2} /^Suites:.*security/{print u; exit}' "$f")
    grep -Eq '^Suites:.*bookworm-updates' "$f" && updates=1
  fi
  if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
    mirror=$(awk '$1=="deb" && $3 !~ /security/ {print $2; exit}' /etc/apt/sources.list)
    sec=$(awk '$1=="deb" && $3 ~ /security/ {print $2; exit}' /etc/apt/sources.list)
    awk '$1=="deb" && $3=="bookworm-updates"{f=1} END{exit !f}' /etc/apt/sources.list && updates=1
  fi
  [ -n "$mirror" ] || return 1
  echo "deb $mirror bookworm main"
  [ "$updates" = 1 ] && echo "deb $mirror bookworm-updates main"
  [ -n "$sec" ] && echo "deb $sec bookworm-security main"
  return 0
}

# in_root CMD...: run CMD chrooted into the rootfs with /dev and /proc mounted
# in a private mount namespace, so the mounts vanish with the command.
in_root() {
  unshare --mount --propagation private -- /bin/sh -c '
    r=$1; shift
    mount --bind /dev "$r/dev" && mount -t proc proc "$r/proc" || exit 1
    exec chroot "$r" /usr/bin/env -i PYTHONDONTWRITEBYTECODE=1 "$@"' sh "$ROOT" "${ENV[@]}" HOME=/root "$@"
}

# remove_tree DIR...: rm -rf, after unmounting whatever an interrupted
# mmdebstrap left mounted below DIR (its /dev, /proc, /sys), deepest first, so
# that rm never walks into the host's /dev.
remove_tree() {
  local d m
  for d in "$@"; do
    while read -r m; do
      case $m in "$d"/*) umount -l "$m" 2>/dev/null || true ;; esac
    done < <(findmnt -rn -o TARGET | awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2-)
    rm -rf --one-file-system "$d"
  done
}

# 1. Debian packages.
if [ "$REUSE" = 1 ] && [ -d "$ROOT" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "${PACKAGES[*]}" ]; then
  say "reusing $ROOT (packages: ${PACKAGES[*]})"
else
  mapfile -t SOURCES < <(apt_sources)
  [ ${#SOURCES[@]} -gt 0 ] || die "no Debian mirror in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
  case $NAME in torch) est="about 3 min" ;; *) est="about 1 min" ;; esac
  say "mmdebstrap ${PACKAGES[*]} ($est; log $LOG)..."
  rm -f "$STAMP"
  remove_tree "$ROOT" "$ROOT.tmp"
  mkdir -p "$OUT/apt-cache"
  start=$SECONDS
  # apt-cache/ is synced in before apt runs and out after (mmdebstrap's own
  # recipe); the image's /var/cache/apt is emptied by mmdebstrap's cleanup.
  # resolv.conf and hostname are the host's during the build: not in the image.
  if ! mmdebstrap --variant=minbase --mode=root --include="$(IFS=,; echo "${PACKAGES[*]}")" \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' --aptopt='APT::Install-Recommends "false"' \
      --skip=essential/unlink \
      --setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
      --setup-hook="sync-in $OUT/apt-cache /var/cache/apt/archives/" \
      --customize-hook="sync-out /var/cache/apt/archives $OUT/apt-cache" \
      --customize-hook='rm -f "$1"/var/cache/apt/archives/*.deb; : > "$1"/etc/resolv.conf; echo ringmaster > "$1"/etc/hostname' \
      bookworm "$ROOT.tmp" "${SOURCES[@]}" > "$LOG" 2>&1; then
    remove_tree "$ROOT.tmp"
    die "mmdebstrap failed: see $LOG"
  fi
  mv "$ROOT.tmp" "$ROOT"
  echo "${PACKAGES[*]}" > "$STAMP"
  say "mmdebstrap took $((SECONDS - start)) s ($(du -sh "$ROOT" | cut -f1))"
fi

# 2. What Ringmaster adds to every image, then the image's own extras. Each
# step replaces what an earlier run put there, so reruns on a kept rootfs agree.
echo "$NAME" > "$ROOT/etc/ringmaster-image"
mkdir -p "$ROOT/work" "$ROOT/opt/ringmaster"
EXTRAS=()
case $NAME in
  torch)
    say "copying the Ringmaster runtime into /opt/ringmaster..."
    rm -rf "$ROOT/opt/ringmaster/bin" "$ROOT/opt/ringmaster/python"
    mkdir -p "$ROOT/opt/ringmaster/bin" "$ROOT/opt/ringmaster/python"
    cp -p "$TRAIN_BIN" "$ROOT/opt/ringmaster/bin/ringmaster-train"
    # Symlinks resolved (-L), bytecode left out: python3 compiles what it needs.
    cp -RLp "$TORCH_PY" "$ROOT/opt/ringmaster/python/ringmaster_torch"
    find "$ROOT/opt/ringmaster/python" -name __pycache__ -prune -exec rm -rf {} +
    ;;
  tfjs)
    say "npm install @tensorflow/tfjs@$TFJS_VERSION @tensorflow/tfjs-backend-wasm@$TFJS_VERSION (host npm; cache $OUT/npm-cache)..."
    STAGE=$OUT/tfjs.npm
    mkdir -p "$STAGE"
    [ -f "$STAGE/package.json" ] || echo '{"name":"ringmaster-tfjs-image","version":"1.0.0","private":true}' > "$STAGE/package.json"
    if ! (cd "$STAGE" && npm install --prefix "$STAGE" --cache "$OUT/npm-cache" --prefer-offline --no-audit --no-fund \
          --save-exact "@tensorflow/tfjs@$TFJS_VERSION" "@tensorflow/tfjs-backend-wasm@$TFJS_VERSION" \
          > "$OUT/tfjs.npm.log" 2>&1); then
      die "npm install failed: see $OUT/tfjs.npm.log"
    fi
    rm -rf "$ROOT/opt/tfjs"
    mkdir -p "$ROOT/opt/tfjs"
    cp -R "$STAGE/node_modules" "$ROOT/opt/tfjs/node_modules"
    # Source maps are two thirds of it (about 200 of 310 MB) and only serve debuggers.
    find "$ROOT/opt/tfjs/node_modules" -type f -name '*.map' -delete
    chown -R 0:0 "$ROOT/opt/tfjs"
    EXTRAS=("npm:@tensorflow/tfjs@$TFJS_VERSION" "npm:@tensorflow/tfjs-backend-wasm@$TFJS_VERSION")
    ;;
  tensorflow|mxnet)
    CACHE=$OUT/pip-cache
    mkdir -p "$CACHE"
    # shellcheck source=pip-target.sh
    . "$REPO/scripts/images/pip-target.sh"
    # Offline first: a rerun finds every wheel in the cache and asks no index.
    if ! python3 -m pip download --quiet --no-index --find-links "$CACHE" "${PIP_TARGET[@]}" --no-deps \
         --require-hashes -r "$REQUIREMENTS" -d "$CACHE" > /dev/null 2>&1; then
      say "pip download of $(grep -c '^[a-z0-9].*==' "$REQUIREMENTS") pinned wheels (cache $CACHE)..."
      python3 -m pip download --quiet "${PIP_TARGET[@]}" --no-deps --require-hashes -r "$REQUIREMENTS" \
        -d "$CACHE" > "$OUT/$NAME.pip.log" 2>&1 || die "pip download failed: see $OUT/$NAME.pip.log"
    fi
    say "python3 -m venv /opt/venv, pip install --require-hashes --no-deps (offline, from the cache)..."
    rm -rf "$ROOT/opt/venv" "$ROOT/tmp/wheels"
    in_root /usr/bin/python3 -m venv /opt/venv || die "python3 -m venv /opt/venv fails in the image"
    mkdir -p "$ROOT/tmp/wheels"
    cp -l "$CACHE"/*.whl "$ROOT/tmp/wheels/" 2>/dev/null || cp "$CACHE"/*.whl "$ROOT/tmp/wheels/"
    cp "$REQUIREMENTS" "$ROOT/tmp/wheels/requirements.txt"
    # Bytecode compiled at install (pip's default): tasks import without
    # compiling and write nothing into the image.
    if ! in_root /opt/venv/bin/pip install --no-index --find-links /tmp/wheels --no-cache-dir --require-hashes \
         --no-deps -r /tmp/wheels/requirements.txt > "$OUT/$NAME.pip.log" 2>&1; then
      rm -rf "$ROOT/tmp/wheels"
      die "pip install failed: see $OUT/$NAME.pip.log"
    fi
    rm -rf "$ROOT/tmp/wheels"
    # TensorFlow's C++ headers (287 MB of 1.6 GB) only serve compiling custom
    # ops against it (tf.sysconfig.get_include()), which a task does not do.
    [ "$NAME" = tensorflow ] && rm -rf "$ROOT"/opt/venv/lib/python3*/site-packages/tensorflow/include
    # pip check, less what the lock's "# provided:" line says another package provides.
    read -r -a provided < <(sed -n 's/^# provided: *//p' "$REQUIREMENTS"; echo)
    out=$(in_root /opt/venv/bin/pip check 2>&1 || true)
    for p in "${provided[@]}"; do out=$(echo "$out" | grep -v "requires $p, which is not installed" || true); done
    out=$(echo "$out" | grep -v '^No broken requirements' || true)
    [ -z "$out" ] || die "pip check: $(echo "$out" | tail -1)"
    missing=$({ in_root sh -c 'find /opt/venv -name "*.so*" -type f ! -path "*.libs/*" -exec ldd {} +' 2>&1 || true; } |
              awk '/not found/{print $1}' | sort -u | tr '\n' ' ')
    [ -z "$missing" ] || die "libraries missing in the image: $missing(add their Debian packages to the $NAME list)"
    mapfile -t EXTRAS < <(in_root /opt/venv/bin/pip list --format=freeze 2>/dev/null | sed 's/^/pypi:/')
    ;;
esac

# 3. Checks, in the image as a task sees it (its env, its libraries).
say "checking in a chroot..."
in_root python3 -c 'print("ok")' > /dev/null 2>&1 || die "python3 does not run in the image"
case $NAME in
  torch)
    missing=$({ in_root sh -c 'ldd /opt/ringmaster/bin/ringmaster-train /opt/ringmaster/python/ringmaster_torch/_C*.so' 2>&1 ||
                true; } | awk '/not found/{print $1}' | sort -u | tr '\n' ' ')
    [ -z "$missing" ] || die "libraries missing in the image: $missing(add their Debian packages to the torch list)"
    blas=$(in_root readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>&1 || true)
    case $blas in *openblas*) ;; *) die "libblas.so.3 is $blas, not OpenBLAS (the reference BLAS is 20x slower)" ;; esac
    out=$(in_root ringmaster-train --help 2>&1) || die "ringmaster-train --help fails in the image: $(echo "$out" | tail -1)"
    out=$(in_root python3 -c 'import torch, ringmaster_torch; print(torch.__version__)' 2>&1) ||
      die "import ringmaster_torch fails in the image: $(echo "$out" | tail -1)"
    say "torch $out, ringmaster-train and ringmaster_torch load"
    ;;
  tfjs)
    out=$(in_root node -e "const tf = require('@tensorflow/tfjs'); require('@tensorflow/tfjs-backend-wasm');
      console.log('node ' + process.version + ', tfjs ' + tf.version.tfjs)" 2>&1) ||
      die "TensorFlow.js does not load in the image: $(echo "$out" | tail -1)"
    say "$out"
    ;;
  tensorflow)
    # A 2-layer Keras model, one SGD step on random data: the import, the
    # kernels and the gradient tape all work on this CPU.
    out=$(in_root python3 -c '
import math, numpy as np, tensorflow as tf
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
loss = model.fit(np.random.rand(32, 8), np.random.rand(32, 1), batch_size=32, epochs=1, verbose=0).history["loss"][0]
assert math.isfinite(loss), loss
print(f"tensorflow {tf.__version__} (keras {tf.keras.__version__}), one step: loss {loss:.3f}")' 2>&1) ||
      die "tensorflow does not train in the image: $(echo "$out" | tail -1)"
    say "$(echo "$out" | tail -1)"
    ;;
  mxnet)
    # A 2-layer Gluon net, one Trainer step on random data.
    out=$(in_root python3 -c '
import math, mxnet as mx, numpy as np
from mxnet import autograd, gluon, nd
net = gluon.nn.Sequential()
net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(1))
net.initialize()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
x, y = nd.random.uniform(shape=(32, 8)), nd.random.uniform(shape=(32, 1))
with autograd.record():
    loss = gluon.loss.L2Loss()(net(x), y)
loss.backward()
trainer.step(32)
value = float(loss.mean().asscalar())
assert math.isfinite(value), value
print(f"mxnet {mx.__version__} (numpy {np.__version__}), one step: loss {value:.3f}")' 2>&1) ||
      die "mxnet does not train in the image: $(echo "$out" | tail -1)"
    say "$(echo "$out" | tail -1)"
    ;;
esac

# 4. Tar, digest, metadata; renamed into place, NAME.json last.
say "tar..."
tar_opts=(--sort=name --numeric-owner --format=gnu)
[ -n "${SOURCE_DATE_EPOCH:-}" ] && tar_opts+=(--mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime)
tar -C "$ROOT" "${tar_opts[@]}" -cf "$OUT/.$NAME.tar.tmp" .
digest=$(sha256sum "$OUT/.$NAME.tar.tmp" | cut -d' ' -f1)
size=$(stat -c %s "$OUT/.$NAME.tar.tmp")
mapfile -t versions < <(chroot "$ROOT" dpkg-query -W -f '${Package}=${Version}\n' "${PACKAGES[@]}")
jq -n --arg name "$NAME" --arg digest "sha256:$digest" --argjson size "$size" \
  --arg built_at "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  --argjson packages "$(printf '%s\n' "${versions[@]}" "${EXTRAS[@]}" | jq -R . | jq -s .)" \
  --argjson env "$(printf '%s\n' "${ENV[@]}" | jq -R . | jq -s .)" \
  --argjson cmd "$(printf '%s\n' "${CMD[@]}" | jq -R . | jq -s .)" \
  '{name: $name, digest: $digest, size: $size, packages: $packages, built_at: $built_at,
    env: $env, entrypoint: [], cmd: $cmd}' > "$OUT/.$NAME.json.tmp"
rm -f "$OUT/$NAME.json"
mv "$OUT/.$NAME.tar.tmp" "$OUT/$NAME.tar"
mv "$OUT/.$NAME.json.tmp" "$OUT/$NAME.json"
say "done: $OUT/$NAME.tar ($((size / 1048576)) MiB, sha256:$digest)"
