#!/usr/bin/env bash
# Builds Horovod 0.28.1 (Gloo and PyTorch only) from its PyPI source distribution
# against Debian's torch (/usr/bin/python3, python3-torch) into
#   build/bench/horovod/site   (add it to PYTHONPATH)
# The sdist is fetched by hash (requirements-horovod.txt). The result is cached:
# a second run with the same sdist and torch returns at once. The log of the last
# build is build/bench/horovod/build.log; on failure its error lines are printed.
#
#   bench/frameworks/build_horovod.sh      JOBS=2 (parallel compile jobs)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
OUT=$PWD/build/bench/horovod
REQ=bench/frameworks/requirements-horovod.txt
JOBS=${JOBS:-2}
mkdir -p "$OUT/dist"

torch_ver=$($PY -c 'import torch; print(torch.__version__)')
want="$(grep -o 'sha256:[0-9a-f]*' "$REQ") torch=$torch_ver"
if [ -f "$OUT/stamp" ] && [ "$(cat "$OUT/stamp")" = "$want" ] &&
   PYTHONPATH="$OUT/site" $PY -c 'import horovod.torch' 2>/dev/null; then
  echo "build_horovod: cached ($OUT/site, $want)"
  exit 0
fi

# The runtime needs cloudpickle, psutil, pyyaml, packaging (Debian's, see scripts/install-deps.sh).
$PY -c 'import cloudpickle, psutil, yaml, packaging' ||
  { echo "build_horovod: missing python3-cloudpickle/psutil/yaml/packaging (scripts/install-deps.sh)" >&2; exit 2; }

$PY -m pip download --quiet --no-deps --no-binary :all: --require-hashes -r "$REQ" -d "$OUT/dist"
sdist=$(ls "$OUT"/dist/horovod-0.28.1.tar.gz)

rm -rf "$OUT/site" "$OUT/stamp"
start=$(date +%s)
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1
export HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=gloo
export HOROVOD_GPU_OPERATIONS= HOROVOD_WITHOUT_GPU=1
export MAKEFLAGS=-j$JOBS
# ccache, if there: pip builds in a new temporary directory each time, so paths are hashed relative to it.
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR=${TMPDIR:-/tmp} CCACHE_NOHASHDIR=1
fi
if ! nice $PY -m pip install --no-build-isolation --no-deps --no-cache-dir -v \
      --target "$OUT/site" "$sdist" >"$OUT/build.log" 2>&1; then
  echo "build_horovod: FAILED after $(( $(date +%s) - start ))s; error lines of $OUT/build.log:" >&2
  grep -n -E 'error|Error|ERROR' "$OUT/build.log" | head -40 >&2
  exit 1
fi
PYTHONPATH="$OUT/site" $PY -c 'import horovod, horovod.torch as hvd; print("horovod", horovod.__version__, "gloo:", hvd.gloo_built(), "mpi:", hvd.mpi_built())'
echo "$want" >"$OUT/stamp"
echo "build_horovod: built in $(( $(date +%s) - start ))s into $OUT/site"
