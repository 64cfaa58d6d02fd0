#!/usr/bin/env bash
# Regenerates a Python image's lock file, scripts/images/requirements/NAME.txt:
# every package the image's /opt/venv holds, pinned to one version and the
# sha256 of the one wheel build.sh installs (pip-target.sh: CPython 3.11,
# manylinux x86_64).
#
#   lock.sh NAME        NAME: tensorflow | mxnet
#
# The packages asked for are the file's "# top-level:" line; edit it, rerun,
# commit the result. pip resolves the rest (wheels only) into a temporary
# directory and `pip hash` digests what it saved. Needs python3 with pip.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: lock.sh tensorflow|mxnet" >&2; exit 2; }
NAME=$1
FILE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/requirements/$NAME.txt
[ -f "$FILE" ] || { echo "lock.sh: $FILE is missing" >&2; exit 1; }
read -r -a TOP < <(sed -n 's/^# top-level: *//p' "$FILE")
[ ${#TOP[@]} -gt 0 ] || { echo "lock.sh: no '# top-level:' line in $FILE" >&2; exit 1; }
# "# provided: NAME...": packages a dependency asks for under a name that
# another pinned package already provides (tf-keras asks for tensorflow;
# tensorflow-cpu is the same module): left out of the lock.
read -r -a PROVIDED < <(sed -n 's/^# provided: *//p' "$FILE"; echo)

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# shellcheck source=pip-target.sh
. "$(dirname "${BASH_SOURCE[0]}")/pip-target.sh"
python3 -m pip download --quiet "${PIP_TARGET[@]}" -d "$TMP" "${TOP[@]}"

{
  sed -n '/^#/p' "$FILE"   # the header, top-level line included, as it was
  for whl in "$TMP"/*.whl; do
    base=$(basename "$whl")
    # name-version-...: the name's _ are -, in lower case (PEP 503).
    name=$(echo "${base%%-*}" | tr '_A-Z' '-a-z')
    version=$(echo "$base" | cut -d- -f2)
    for p in "${PROVIDED[@]}"; do [ "$name" = "$p" ] && continue 2; done
    hash=$(python3 -m pip hash "$whl" | sed -n 's/^--hash=//p')
    printf '%s==%s \\\n    --hash=%s\n' "$name" "$version" "$hash"
  done
} > "$TMP/lock.txt"
mv "$TMP/lock.txt" "$FILE"
echo "lock.sh: $FILE: $(grep -c '^[a-z0-9].*==' "$FILE") packages" >&2
