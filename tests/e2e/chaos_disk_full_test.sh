#!/usr/bin/env bash
# Chaos: the server's disk fills up (issue 14). A standalone server whose
# data dir is a 64 MiB tmpfs, and one agent (process executor) on the
# ordinary disk. With finished jobs, a file and a running job's log stored,
# a filler file takes every byte left. Then:
#  - a submit answers 507 saying the server's disk is full (the CLI: one
#    line, non-zero), and stores nothing;
#  - an upload answers 507 and leaves no file, no temp file, and alice's
#    usage as it was;
#  - the running job's log stops growing (the agent keeps what it could not
#    ship), the finished jobs and the file read back as before, and the
#    server is alive.
# The filler is deleted, nothing restarted: within seconds submits and
# uploads succeed again, the running job's remaining lines arrive, each
# line exactly once and in order, and the database passes integrity_check.
# Needs root (mount). Only loopback; ends only what it started.
source "$(dirname "$0")/lib.sh"
N=800 PORTS=32860-32879
SRV=$DATA/srv  # the server's data dir, on the tmpfs; the agent's stays on the disk
mkdir -p "$SRV"
mount -t tmpfs -o size=64m,mode=0700 tmpfs "$SRV" || fail "cannot mount a tmpfs on $SRV (the test needs root)"
chmod 0711 "$DATA"  # tasks' uids enter their sandboxes below it
trap 'rc=$?; set +e; stop_agents; stop_up
  if [ $rc -ne 0 ]; then
    for f in server agent-node-a; do
      [ -f "$DATA/$f.log" ] && { echo "---- $f.log (last 30 lines)" >&2; tail -n 30 "$DATA/$f.log" >&2; }
    done
  fi
  umount "$SRV" 2>/dev/null || umount -l "$SRV"
  (exit $rc); cleanup' EXIT

rmc() { "$RM" --data "$SRV" "$@"; }
"$RM" server --data "$SRV" --port 0 --max-pending-jobs 0 >> "$DATA/server.log" 2>&1 &
UP_PID=$!
for _ in $(seq 1 100); do
  [ -f "$SRV/server.json" ] && curl -sf "$(jq -r .url "$SRV/server.json")/healthz" > /dev/null && break
  sleep 0.1
done
URL=$(jq -r .url "$SRV/server.json")
start_agent node-a "$PORTS" "$SANDBOXES"
await_nodes 1
ADMIN="Authorization: Bearer $(cat "$SRV/admin.token")"
rmc users create alice > /dev/null 2>&1
rmc users quota alice 10Mi 2> /dev/null
ALICE=$(rmc tokens create --user alice)
asalice() { RINGMASTER_TOKEN=$ALICE rmc "$@"; }

# ---- what is stored before the disk fills: finished jobs, a file, a running job's log
spec() { jq -n --arg n "$1" --arg c "$2" '{name: $n, command: ["/bin/sh", "-c", $c], resources: {cpu: 0.1, memory: "16Mi"}}'; }
DONE=()
for i in 1 2 3; do DONE+=("$(spec "done-$i" "echo done $i" | rmc submit --no-workdir -)"); done
for id in "${DONE[@]}"; do rmc wait "$id" --timeout 60 > /dev/null || { rmc show "$id"; fail "job $id did not succeed"; }; done
job_json() { curl -sf -H "$ADMIN" "$URL/api/v1/jobs/$1"; }
for id in "${DONE[@]}"; do job_json "$id" > "$DATA/job-$id.before"; rmc logs "$id" > "$DATA/log-$id.before"; done
head -c 150000 /dev/urandom > "$TOOLS/kept.bin"
asalice files put "$TOOLS/kept.bin" > /dev/null || fail "the first upload failed"
USAGE=$(asalice files du)
# Lines of 200 bytes: a file's last page (tmpfs gives out whole pages) fills within a second.
PAD=$(printf '%0190d' 0)
PROG='import time
for i in range(1, '$N' + 1):
    print(f"line {i:05d} '$PAD'", flush=True)
    time.sleep(0.05)'
RUN=$(jq -n --arg p "$PROG" '{name: "chatty", command: ["/usr/bin/python3", "-c", $p], resources: {cpu: 0.5, memory: "64Mi"}}' |
  rmc submit --no-workdir -)
wait_state "$RUN" RUNNING 60
log_lines() { rmc logs "$RUN" | wc -l; }
for _ in $(seq 1 300); do [ "$(log_lines)" -ge 40 ] && break; sleep 0.1; done
pass "stored: jobs ${DONE[*]} (finished), users/alice/kept.bin, job $RUN running with $(log_lines) log lines shipped"

# ---- fill the tmpfs
dd if=/dev/zero of="$SRV/filler" bs=1M 2> /dev/null || true
dd if=/dev/zero of="$SRV/filler" bs=4k oflag=append conv=notrunc 2> /dev/null || true
[ "$(df --output=avail "$SRV" | tail -n 1 | tr -d ' ')" = 0 ] || fail "the tmpfs is not full: $(df -h "$SRV" | tail -n 1)"
FULL_AT=$(log_lines)
pass "the server's data dir is full ($(du -sh "$SRV/filler" | cut -f1) of filler); job $RUN's log had $FULL_AT lines"

# A submit: 507 with a clear message; the CLI says it in one line and exits non-zero.
spec refused "echo never" > "$TOOLS/refused.json"
CODE=$(curl -s -o "$DATA/submit.body" -w '%{http_code}' -H "$ADMIN" --data-binary @"$TOOLS/refused.json" "$URL/api/v1/jobs")
[ "$CODE" = 507 ] || [ "$CODE" = 503 ] || fail "a submit on a full disk answered $CODE: $(cat "$DATA/submit.body")"
grep -q "the server's disk is full" "$DATA/submit.body" && grep -q "try again later" "$DATA/submit.body" ||
  fail "the submit's answer does not say the disk is full: $(cat "$DATA/submit.body")"
set +e
ERR=$(rmc submit --no-workdir - < "$TOOLS/refused.json" 2>&1); RC=$?
set -e
[ "$RC" != 0 ] && [ "$(wc -l <<<"$ERR")" = 1 ] && grep -q "the server's disk is full" <<<"$ERR" ||
  fail "the CLI's submit on a full disk (exit $RC) did not say so in one line: $ERR"
[ "$(curl -sf -H "$ADMIN" "$URL/api/v1/jobs?all=1" | jq '[.jobs[] | select(.name == "refused")] | length')" = 0 ] ||
  fail "a refused submit stored a job"
pass "submit: $CODE $(jq -r .error.code "$DATA/submit.body"); the CLI exits $RC with: $ERR"

# An upload: 507, and nothing left behind.
head -c 20000 /dev/urandom > "$TOOLS/new.bin"
CODE=$(curl -s -o "$DATA/put.body" -w '%{http_code}' -X PUT -H "Authorization: Bearer $ALICE" --data-binary @"$TOOLS/new.bin" \
  "$URL/api/v1/files/users/alice/new.bin")
[ "$CODE" = 507 ] && grep -q "the server's disk is full" "$DATA/put.body" ||
  fail "an upload on a full disk answered $CODE: $(cat "$DATA/put.body")"
set +e
ERR=$(asalice files put "$TOOLS/new.bin" 2>&1); RC=$?
set -e
[ "$RC" != 0 ] && grep -q "the server's disk is full" <<<"$ERR" || fail "the CLI's upload on a full disk (exit $RC): $ERR"
! asalice files ls | grep -q new.bin || fail "the refused upload left a file: $(asalice files ls)"
[ -z "$(ls -A "$SRV/blobs/.tmp")" ] || fail "the refused upload left temp files: $(ls -A "$SRV/blobs/.tmp")"
[ "$(asalice files du)" = "$USAGE" ] || fail "alice's usage changed with a refused upload: $(asalice files du), was $USAGE"
pass "upload: 507, no file, no temp file, usage unchanged ($(tail -n 1 <<<"$USAGE"))"

# The running job's log stops growing (once its file's last page is full); what
# was stored reads back the same; the server lives.
L1=-1
for _ in $(seq 1 15); do
  L2=$(log_lines)
  [ "$L1" = "$L2" ] && break
  L1=$L2
  sleep 1
done
sleep 3
L2=$(log_lines)
[ "$L1" = "$L2" ] || fail "job $RUN's log grew from $L1 to $L2 lines on a full disk"
[ "$(job_field "$RUN" state)" = RUNNING ] || fail "job $RUN is $(job_field "$RUN" state) on a full disk, not RUNNING"
for id in "${DONE[@]}"; do
  job_json "$id" | cmp -s - "$DATA/job-$id.before" || fail "GET of job $id changed on a full disk: $(job_json "$id")"
  rmc logs "$id" | cmp -s - "$DATA/log-$id.before" || fail "job $id's log changed on a full disk"
done
[ "$(asalice files cat kept.bin | sha256sum)" = "$(sha256sum < "$TOOLS/kept.bin")" ] || fail "kept.bin reads back different"
kill -0 "$UP_PID" && curl -sf "$URL/healthz" > /dev/null || fail "the server died on a full disk"
pass "job $RUN's log stays at $L2 lines, still RUNNING; jobs ${DONE[*]} and kept.bin read back the same; the server is up"

# ---- space returns: no restart, writes succeed within seconds
rm -f "$SRV/filler"
FREED=$(date +%s%N)
OK=""
for _ in $(seq 1 100); do
  if NEW=$(spec after "echo after" | rmc submit --no-workdir - 2>/dev/null); then OK=1; break; fi
  sleep 0.1
done
[ -n "$OK" ] || fail "submits still fail 10 s after the disk was freed"
pass "a submit succeeds $(( ($(date +%s%N) - FREED) / 1000000 )) ms after the filler was deleted (job $NEW)"
asalice files put "$TOOLS/new.bin" > /dev/null || fail "the upload still fails after the disk was freed"
[ "$(asalice files cat new.bin | sha256sum)" = "$(sha256sum < "$TOOLS/new.bin")" ] || fail "new.bin reads back different"
asalice files du | grep -q "quota: 174.0 KiB used" || fail "alice's usage is not kept.bin and new.bin (170000 bytes and 4 KiB each): $(asalice files du)"
rmc wait "$NEW" --timeout 60 > /dev/null || { rmc show "$NEW"; fail "job $NEW did not succeed"; }
pass "the upload succeeds again; job $NEW ran"

rmc wait "$RUN" --timeout 120 > /dev/null || { rmc show "$RUN"; fail "job $RUN did not succeed"; }
[ "$(job_field "$RUN" restarts)" = 0 ] || fail "job $RUN was restarted"
rmc logs "$RUN" > "$DATA/got.log"
seq -f "[0] line %05g $PAD" 1 "$N" > "$DATA/want.log"
DUP=$(sort "$DATA/got.log" | uniq -d | head -5)
DIFF=$(diff "$DATA/want.log" "$DATA/got.log" | head -20) ||
  fail "job $RUN's log is not each line exactly once, in order ($(wc -l < "$DATA/got.log") lines; duplicated: ${DUP:-none}): $DIFF"
[ "$L2" -lt "$N" ] || fail "job $RUN shipped all its $N lines before the disk was freed: the job is too short for this machine"
pass "job $RUN succeeded; its log holds its $N lines, each exactly once, in order ($((N - L2)) arrived after the disk was freed)"

# ---- the database: whole, every job with all its tasks and an event
stop_agents
stop_up
[ "$(sqlite3 "$SRV/meta.db" 'PRAGMA integrity_check')" = ok ] || fail "the database is damaged"
HALF=$(sqlite3 "$SRV/meta.db" "SELECT j.id FROM jobs j WHERE j.replicas != (SELECT count(*) FROM tasks t WHERE t.job_id = j.id)
  OR NOT EXISTS (SELECT 1 FROM events e WHERE e.job_id = j.id)")
[ -z "$HALF" ] || fail "jobs without all their tasks or events: $HALF"
[ "$(sqlite3 "$SRV/meta.db" "SELECT count(*) FROM jobs WHERE name = 'refused'")" = 0 ] || fail "a refused submit is in the database"
pass "integrity_check ok; every job has all its tasks and an event; no refused submit stored"
echo "chaos_disk_full_test: all passed"
