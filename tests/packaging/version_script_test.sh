#!/usr/bin/env bash
# cmake/version.cmake, the script that writes the build's version header, on
# scratch git repositories: a clean checkout gives HEAD's short hash, a changed
# tracked file adds -dirty (an untracked one does not), a directory that is
# not the top of a checkout (a tarball, even unpacked inside another
# checkout) gives "unknown", GIT_COMMIT wins, and an unchanged header is not
# rewritten (so a build after it recompiles nothing).
#   version_script_test.sh path/to/version.cmake path/to/version.h.in
set -euo pipefail
SCRIPT=$(realpath "$1")
TEMPLATE=$(realpath "$2")
TMP=$(mktemp -d /tmp/rm-version-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }
# commit_of SOURCE_DIR [-DGIT_COMMIT=...]: the kGitCommit the script writes for SOURCE_DIR.
commit_of() {
  cmake -DSOURCE_DIR="$1" -DTEMPLATE="$TEMPLATE" -DOUTPUT="$TMP/out/version.h" -DVERSION=9.8.7 "${@:2}" -P "$SCRIPT"
  grep -q 'kVersion\[\] = "9.8.7"' "$TMP/out/version.h" || fail "kVersion is not 9.8.7: $(cat "$TMP/out/version.h")"
  sed -n 's/.*kGitCommit\[\] = "\(.*\)";/\1/p' "$TMP/out/version.h"
}

export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.org GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.org
git init -q "$TMP/repo"
echo one > "$TMP/repo/a.txt"
mkdir "$TMP/repo/tarball"
echo x > "$TMP/repo/tarball/CMakeLists.txt"
git -C "$TMP/repo" add a.txt
git -C "$TMP/repo" commit -qm one
head=$(git -C "$TMP/repo" rev-parse --short=12 HEAD)

got=$(commit_of "$TMP/repo")
[ "$got" = "$head" ] || fail "clean checkout: got '$got', want '$head'"
pass "clean checkout: $got"

before=$(stat -c %Y.%y "$TMP/out/version.h")
sleep 1.1
commit_of "$TMP/repo" > /dev/null
[ "$(stat -c %Y.%y "$TMP/out/version.h")" = "$before" ] || fail "an unchanged header was rewritten"
pass "an unchanged header keeps its mtime"

echo untracked > "$TMP/repo/scratch.txt"
got=$(commit_of "$TMP/repo")
[ "$got" = "$head" ] || fail "an untracked file: got '$got', want '$head'"
echo two > "$TMP/repo/a.txt"
got=$(commit_of "$TMP/repo")
[ "$got" = "$head-dirty" ] || fail "a changed tracked file: got '$got', want '$head-dirty'"
pass "changed tracked file: $got"

git -C "$TMP/repo" commit -qam two
got=$(commit_of "$TMP/repo")
[ "$got" = "$(git -C "$TMP/repo" rev-parse --short=12 HEAD)" ] && [ "$got" != "$head" ] || fail "after a commit: got '$got'"
pass "a new commit is picked up: $got"

got=$(commit_of "$TMP/repo/tarball")
[ "$got" = unknown ] || fail "a directory inside another checkout: got '$got', want unknown"
mkdir "$TMP/plain"
got=$(commit_of "$TMP/plain")
[ "$got" = unknown ] || fail "not a checkout: got '$got', want unknown"
pass "not a checkout: unknown"

got=$(commit_of "$TMP/plain" -DGIT_COMMIT=0123456789ab)
[ "$got" = 0123456789ab ] || fail "GIT_COMMIT given: got '$got'"
pass "GIT_COMMIT given: $got"
