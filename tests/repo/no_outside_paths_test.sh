#!/usr/bin/env bash
# The repository stands alone: no tracked file may point at a path outside it
# that a user's clone does not have. Flagged:
#  - a `shared` folder beside the checkout, which some developers keep;
#  - /work/..., the workspace of the machine Ringmaster is developed on;
#  - this checkout's own absolute path (e.g. /home/bob/ringmaster/...), which
#    only the machine running the test has.
# System paths a product legitimately names (/usr/share/datasets,
# /sys/fs/cgroup, /var/lib/ringmaster) are not flagged, nor is a relative
# "/work/" inside a path (<sandbox>/work/outputs).
# Usage: no_outside_paths_test.sh REPO_ROOT
set -euo pipefail
REPO=$(cd "${1:?usage: $0 REPO_ROOT}" && pwd -P)
cd "$REPO"

patterns=(
  '\.\./shared([/`'"'"'" )]|$)'
  '/work/(main|shared|briefs|wt-[A-Za-z0-9_-]+|\.[a-z]+)([/`'"'"'" )]|$)'
  '(^|[[:space:](=:`'"'"'])/work/'
  "$(printf '%s' "$REPO/" | sed 's/[.[\*^$()+?{|]/\\&/g')"
)
# This file names the patterns; build trees are not the repository.
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  search() { git grep -n -I -E -e "$1" -- . ':!tests/repo/no_outside_paths_test.sh' || true; }
else
  search() {
    grep -rnI -E -e "$1" --exclude-dir=.git --exclude-dir='build*' --exclude=no_outside_paths_test.sh . || true
  }
fi

found=0
for p in "${patterns[@]}"; do
  hits=$(search "$p")
  if [ -n "$hits" ]; then
    echo "FAIL: files refer to paths outside the repository (pattern: $p):" >&2
    echo "$hits" | sed 's/^/  /' >&2
    found=1
  fi
done
if [ "$found" != 0 ]; then
  echo "Copy what is needed into the repository (data/, docs/) and refer to it by a path inside it." >&2
  exit 1
fi
echo "ok: no tracked file refers to a shared folder beside the checkout, /work/ or $REPO/"
