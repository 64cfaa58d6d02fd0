#!/usr/bin/env bash
# ringcomm inside the platform: a distributed job whose ranks form their
# group from the environment Ringmaster gives them (rank 0 serves the
# rendezvous store on MASTER_PORT) and run checked all-reduces, over TCP
# with 2 ranks and over shared memory with 3.
source "$(dirname "$0")/lib.sh"
# A test-only tool: staged where every task's uid can run it.
BENCH=$(stage_tool "${RINGCOMM_BENCH:?set RINGCOMM_BENCH}")
# Its own port range: other e2e tests run clusters on this host at the same time.
start_up --cpus 4 --ports 32000-32099

for case in "2 tcp" "3 shm"; do
  set -- $case
  n=$1 transport=$2
  ID=$(jq -n --arg b "$BENCH" --argjson n "$n" --arg t "$transport" \
    '{name: "ringcomm-\($t)", kind: "distributed", replicas: $n, resources: {cpu: 1, memory: "256Mi"},
      command: [$b, "--from-env", "--sizes", "64K:4M", "--transport", $t, "--check", "--timeout", "60"]}' | rmc submit -)
  rmc wait "$ID" --timeout 120 || { rmc logs "$ID"; fail "ringcomm job $ID ($n ranks, $transport) did not succeed"; }
  LOGS=$(rmc logs "$ID")
  for size in 65536 1048576 4194304; do
    grep -Eq "^\[0\] RESULT ringcomm [a-z-]+/$transport $n $size [0-9.]+$" <<<"$LOGS" || fail "no $size-byte result in: $LOGS"
  done
  pass "a $n-rank distributed job ran checked ringcomm all-reduces over $transport"
done
echo "ringcomm_job_test: all passed"
