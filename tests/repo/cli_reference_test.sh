#!/usr/bin/env bash
# docs/cli.md is the page the built CLI prints (`ringmaster cli-reference`):
# a help string changed, or a command added, without the page regenerated
# fails here with the difference and the command that regenerates it.
# Usage: cli_reference_test.sh RINGMASTER_BIN REPO_ROOT
set -euo pipefail
BIN=${1:?usage: $0 RINGMASTER_BIN REPO_ROOT}
REPO=${2:?usage: $0 RINGMASTER_BIN REPO_ROOT}
PAGE=$REPO/docs/cli.md

[ -f "$PAGE" ] || { echo "FAIL: $PAGE is missing: run \`make cli-docs\` and commit it" >&2; exit 1; }
want=$("$BIN" cli-reference) || { echo "FAIL: $BIN cli-reference failed" >&2; exit 1; }
if ! diff_out=$(diff -u --label docs/cli.md --label "ringmaster cli-reference" "$PAGE" <(printf '%s\n' "$want")); then
  echo "FAIL: docs/cli.md differs from what the built CLI prints:" >&2
  head -n 80 <<<"$diff_out" >&2
  echo "Regenerate it with \`make cli-docs\` (or \`$BIN cli-reference > docs/cli.md\`) and commit it." >&2
  exit 1
fi
echo "ok: docs/cli.md is what \`ringmaster cli-reference\` prints"
