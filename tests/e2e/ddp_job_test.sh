#!/usr/bin/env bash
# Python torch DDP as a Ringmaster job: examples/ddp_fmnist.py runs as a
# 2-worker distributed job on the gloo backend and on the ringmaster backend
# (ringcomm), same seed; both succeed and their final losses agree within 1e-4.
# The agent stages ringmaster_torch (found next to its binary) onto the tasks'
# PYTHONPATH; the example script is staged into $TOOLS, the jobs' working dir.
source "$(dirname "$0")/lib.sh"
: "${RINGMASTER_PYTHON_DIR:?set RINGMASTER_PYTHON_DIR}"  # built
stage_tool "$REPO/examples/ddp_fmnist.py" examples > /dev/null
# Its own port range: other e2e tests run clusters on this host at the same time.
start_up --cpus 4 --ports 32100-32199

declare -A LOSS
for backend in gloo ringmaster; do
  ID=$(jq -n --arg b "$backend" \
    '{name: "ddp-\($b)", kind: "distributed", replicas: 2, resources: {cpu: 1, memory: "2Gi"},
      command: ["/usr/bin/python3", "examples/ddp_fmnist.py", "--backend", $b, "--epochs", "1",
                "--max-steps", "150", "--seed", "3"]}' | rmc submit -)
  rmc wait "$ID" --timeout 240 || { rmc logs "$ID"; fail "ddp job $ID on $backend did not succeed"; }
  LOGS=$(rmc logs "$ID")
  LOSS[$backend]=$(sed -n 's/^\[0\] final loss \([0-9.]*\) after 150 steps$/\1/p' <<<"$LOGS")
  [ -n "${LOSS[$backend]}" ] || fail "no final loss in: $LOGS"
  grep -q "^\[0\] ddp on $backend: 2 workers" <<<"$LOGS" || fail "job did not run on $backend: $LOGS"
  pass "a 2-worker DDP job on $backend succeeded: final loss ${LOSS[$backend]}"
done
awk -v a="${LOSS[gloo]}" -v b="${LOSS[ringmaster]}" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4) }' ||
  fail "final losses differ: gloo ${LOSS[gloo]}, ringmaster ${LOSS[ringmaster]}"
pass "ringmaster and gloo end with the same loss (${LOSS[gloo]} vs ${LOSS[ringmaster]})"
echo "ddp_job_test: all passed"
