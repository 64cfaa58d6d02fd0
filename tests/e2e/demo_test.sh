#!/usr/bin/env bash
# `make demo`'s script, as CI runs it.
set -euo pipefail
DEMO_CLEANUP=1 exec bash "${REPO_ROOT:?}/scripts/demo.sh" "${RINGMASTER_BIN:?}"
