#!/usr/bin/env bash
# The Debian packages (`make package`, docs/install.md): CPack on the built
# tree makes ringmaster_<version>_<arch>.deb (and ringmaster-torch where
# libtorch was found); their Depends and Recommends hold no -dev package and
# every Depends is satisfied by a package installed on this machine (or by
# another of the set); the binaries are stripped and the units start the
# installed binary. Then, unpacked into a scratch root (never onto this
# machine), the packaged binary prints its version and runs `ringmaster up`
# on a free loopback port with a scratch data dir, and a job runs on it with
# the packaged trainer and torch backend, which the agent found beside its
# own binary and staged for tasks.
#   BUILD_DIR=<cmake build dir> RM_VERSION=<project version> RINGMASTER_BIN=<the build's ringmaster> REPO_ROOT=...
set -euo pipefail
: "${BUILD_DIR:?set BUILD_DIR to the cmake build directory}"
: "${RM_VERSION:?set RM_VERSION to the version of the project}"
BUILT_BIN=${RINGMASTER_BIN:?set RINGMASTER_BIN to the ringmaster binary of the build}
PKG=$(mktemp -d /tmp/rm-package-test.XXXXXX)
trap 'rm -rf "$PKG"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

# 1. The packages, from the binaries already built (cpack reinstalls and strips them).
START=$(date +%s)
cpack --config "$BUILD_DIR/CPackConfig.cmake" -B "$PKG/out" > "$PKG/cpack.log" 2>&1 || { cat "$PKG/cpack.log"; fail "cpack failed"; }
ARCH=$(dpkg --print-architecture)
MAIN=$PKG/out/ringmaster_${RM_VERSION}_$ARCH.deb
[ -f "$MAIN" ] || { ls -l "$PKG/out"; fail "no $(basename "$MAIN")"; }
DEBS=("$PKG"/out/*.deb)
pass "cpack made ${DEBS[*]##*/} in $(($(date +%s) - START)) s"

# 2. Each package's relations. depends_ok "name (op version)": installed here,
# or one of the set, with a version that satisfies op.
declare -A OURS
for deb in "${DEBS[@]}"; do OURS[$(dpkg-deb -f "$deb" Package)]=$(dpkg-deb -f "$deb" Version); done
# What the installed packages provide (virtual packages such as libspdlog1.10-fmt9), one name a line.
PROVIDED=$(dpkg-query -W -f='${db:Status-Abbrev}|${Provides}\n' | sed -n 's/^ii *|//p' | tr ',' '\n' | sed -E 's/^ +//; s/[ :(].*//' | sort -u)
satisfied() {
  local dep name op="" want="" have
  dep=$(sed -E 's/^ +| +$//g' <<<"$1")
  name=${dep%% *}
  name=${name%%:*}  # an :any or :amd64 qualifier
  if [[ "$dep" =~ \((\<\<|\<=|=|\>=|\>\>)\ *([^\)]+)\) ]]; then
    op=${BASH_REMATCH[1]}
    want=${BASH_REMATCH[2]}
  fi
  if [ -n "${OURS[$name]:-}" ]; then
    have=${OURS[$name]}
  elif have=$(dpkg-query -W -f='${db:Status-Abbrev}${Version}' "$name" 2>/dev/null) && [[ "$have" == ii* ]]; then
    have=${have#ii }
    have=${have# }
  elif grep -qx -- "$name" <<<"$PROVIDED"; then
    return 0  # a virtual package something installed provides
  else
    return 1
  fi
  [ -z "$op" ] && return 0
  local cmp
  case $op in '<<') cmp=lt ;; '<=') cmp=le ;; '=') cmp=eq ;; '>=') cmp=ge ;; '>>') cmp=gt ;; esac
  dpkg --compare-versions "$have" "$cmp" "$want"
}
for deb in "${DEBS[@]}"; do
  name=$(dpkg-deb -f "$deb" Package)
  depends=$(dpkg-deb -f "$deb" Depends)
  [ -n "$depends" ] || fail "$name has no Depends"
  for field in Depends Recommends; do
    if dpkg-deb -f "$deb" "$field" | tr ',|' '\n\n' | sed -E 's/^ +//; s/[ (].*//' | grep -E -- '-dev$'; then
      fail "$name: $field names a -dev package: $(dpkg-deb -f "$deb" "$field")"
    fi
  done
  IFS=',' read -ra groups <<<"$depends"
  for group in "${groups[@]}"; do
    IFS='|' read -ra alternatives <<<"$group"
    ok=0
    for alt in "${alternatives[@]}"; do if satisfied "$alt"; then ok=1; break; fi; done
    [ $ok = 1 ] || fail "$name: Depends '$group' is not satisfied by what is installed here"
  done
  pass "$name: Depends: $depends"
done
MAIN_DEPENDS=$(dpkg-deb -f "$MAIN" Depends)
for lib in libc6 libstdc++6 libsqlite3-0 libssl3 libyaml-cpp iproute2; do
  grep -q "$lib" <<<"$MAIN_DEPENDS" || fail "ringmaster's Depends lacks $lib (dpkg-shlibdeps did not run?): $MAIN_DEPENDS"
done
[ "$(dpkg-deb -f "$MAIN" Section)" = admin ] && [ -n "$(dpkg-deb -f "$MAIN" Maintainer)" ] || fail "Section or Maintainer missing"

# 3. Contents: maintainer scripts, stripped binaries, units that start the installed binary.
dpkg-deb -e "$MAIN" "$PKG/control"
for script in postinst prerm postrm; do
  [ -x "$PKG/control/$script" ] || fail "ringmaster has no executable $script"
  sh -n "$PKG/control/$script" || fail "$script: not valid sh"
done
ROOT=$PKG/root
mkdir -m 0755 "$ROOT"
for deb in "${DEBS[@]}"; do dpkg-deb -x "$deb" "$ROOT"; done
for bin in "$ROOT"/usr/bin/*; do
  sections=$(readelf -S --wide "$bin")  # not piped into grep -q: under pipefail an early exit would read as no match
  if grep -Eq '\.(debug_info|symtab) ' <<<"$sections"; then fail "$bin is not stripped"; fi
done
grep -qx 'ExecStart=/usr/bin/ringmaster server --config /etc/ringmaster/server.toml' "$ROOT/usr/lib/systemd/system/ringmaster-server.service" ||
  fail "ringmaster-server.service: $(grep ExecStart "$ROOT/usr/lib/systemd/system/ringmaster-server.service")"
grep -qx 'ExecStart=/usr/bin/ringmaster agent --config /etc/ringmaster/agent.toml' "$ROOT/usr/lib/systemd/system/ringmaster-agent.service" ||
  fail "ringmaster-agent.service: $(grep ExecStart "$ROOT/usr/lib/systemd/system/ringmaster-agent.service")"
for f in usr/bin/ringmaster-sim usr/bin/ringmaster-shim usr/share/doc/ringmaster/examples/server.toml usr/share/doc/ringmaster/examples/agent.toml \
         usr/share/doc/ringmaster/docs/install.md usr/lib/ringmaster/scripts/images/build.sh \
         usr/lib/ringmaster/scripts/images/pip-target.sh usr/lib/ringmaster/scripts/images/requirements/mxnet.txt \
         usr/lib/python3/dist-packages/ringmaster/__init__.py; do
  [ -e "$ROOT/$f" ] || fail "the package lacks /$f"
done
# The Python client imports from where Debian's python3 looks.
(cd / && PYTHONPATH=$ROOT/usr/lib/python3/dist-packages /usr/bin/python3 -c 'import ringmaster; ringmaster.Client') ||
  fail "import ringmaster from the package failed"
pass "maintainer scripts, stripped binaries, units naming /usr/bin/ringmaster, docs, examples and the Python client"

# 4. The packaged binary: its version is the project's, its commit the build's.
OUT=$("$ROOT/usr/bin/ringmaster" version --client --json)
[ "$(jq -r .client.version <<<"$OUT")" = "$RM_VERSION" ] || fail "the packaged ringmaster says $OUT"
[ "$(jq -r .client.git_commit <<<"$OUT")" = "$("$BUILT_BIN" version --client --json | jq -r .client.git_commit)" ] ||
  fail "the packaged ringmaster's commit is not the build's: $OUT"
pass "packaged ringmaster version: $("$ROOT/usr/bin/ringmaster" version --client)"

# 5. `ringmaster up` from the scratch root (tests/e2e/lib.sh: a free loopback port, a scratch data dir).
export RINGMASTER_BIN=$ROOT/usr/bin/ringmaster
source "$REPO_ROOT/tests/e2e/lib.sh"
trap 'rc=$?; set +e; rm -rf "$PKG"; (exit $rc); cleanup' EXIT
start_up
URL=$(jq -r .url "$DATA/server.json")
curl -sf "$URL/healthz" > /dev/null || fail "/healthz of the packaged server"
[ "$(rmc version --json | jq -r .server.version)" = "$RM_VERSION" ] || fail "the packaged server's version: $(rmc version --json)"
[ "$(rmc nodes --json | jq -r '.nodes[0].agent_version')" = "$RM_VERSION" ] || fail "the packaged agent's version"
pass "the packaged ringmaster up answers /healthz and $RM_VERSION"

# 6. A job on it. With ringmaster-torch, the agent staged the packaged trainer
# (the same bytes) and backend for tasks, from beside its own binary.
if [ -x "$ROOT/usr/bin/ringmaster-train" ]; then
  CHECK='sha256sum "$(command -v ringmaster-train)" | cut -d" " -f1; /usr/bin/python3 -c "import ringmaster_torch; print(ringmaster_torch.BACKEND)"'
else
  CHECK='echo no trainer'
fi
ID=$(jq -n --arg c "$CHECK" '{name: "packaged", command: $c, resources: {cpu: 0.5, memory: "1Gi"}}' | rmc submit --no-workdir -)
rmc wait "$ID" --timeout 120 || { rmc show "$ID"; rmc logs "$ID"; fail "job $ID on the packaged ringmaster did not succeed"; }
LOGS=$(rmc logs "$ID")
if [ -x "$ROOT/usr/bin/ringmaster-train" ]; then
  grep -qx "\[0\] $(sha256sum "$ROOT/usr/bin/ringmaster-train" | cut -d' ' -f1)" <<<"$LOGS" ||
    fail "the task's ringmaster-train is not the packaged one: $LOGS"
  grep -qx '\[0\] ringmaster' <<<"$LOGS" || fail "the task could not import the packaged ringmaster_torch: $LOGS"
  pass "job $ID ran the packaged ringmaster-train and imported the packaged ringmaster_torch"
else
  pass "job $ID succeeded (no ringmaster-torch package in this build)"
fi
