#!/usr/bin/env bash
# `make demo`'s script, as CI runs it.
set -euo pipefail
exec bash "${REPO_ROOT:?}/scripts/demo.sh" "${RINGMASTER_BIN:?}"
