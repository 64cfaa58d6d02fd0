#!/usr/bin/env bash
# Users' files through the CLI on a real `ringmaster up`: a 200 MiB file put
# and got back byte for byte, listed with its size; alice cannot see bob's
# files (404) or write datasets/ (403); a directory round-trips recursively.
# With FILES=s3 the server keeps files in a Ceph RGW this test starts (and
# stops mid-test: 503 naming the backend, then recovery when it returns).
source "$(dirname "$0")/lib.sh"
CEPH=""
EXTRA=()
if [ "${FILES:-local}" = s3 ]; then
  CEPH=$DATA/ceph
  bash "$REPO/tests/fixtures/ceph.sh" up "$CEPH" > /dev/null
  trap 'bash "$REPO/tests/fixtures/ceph.sh" down "$CEPH"; cleanup' EXIT
  EXTRA=(--files "$(cat "$CEPH/s3.url")")
fi
start_up "${EXTRA[@]}"
grep -q "users' files: ${FILES:-local}" "$DATA/up.log" || fail "the server does not say it keeps files in ${FILES:-local}"

alice_and_bob

# 1. 200 MiB up and back: same SHA-256; ls shows the size.
head -c $((200 << 20)) /dev/urandom > "$TOOLS/big.bin"
as_alice files put "$TOOLS/big.bin" > /dev/null || fail "put of 200 MiB failed"
as_alice files get big.bin "$TOOLS/big.back" 2> /dev/null || fail "get of 200 MiB failed"
[ "$(sha256sum < "$TOOLS/big.bin")" = "$(sha256sum < "$TOOLS/big.back")" ] || fail "the file came back different"
as_alice files ls | grep -Eq "^ *209715200  .*  users/alice/big.bin$" || fail "ls does not show the size: $(as_alice files ls)"
rm -f "$TOOLS/big.back"
pass "200 MiB put and got back with the same SHA-256; ls shows 209715200 bytes"

# 1a. A NAME.part symlink planted in a shared directory is not written through.
echo "not yours" > "$TOOLS/victim"
ln -sf "$TOOLS/victim" "$TOOLS/small.back.part"
head -c 4096 /dev/urandom > "$TOOLS/small.bin"
as_alice files put "$TOOLS/small.bin" > /dev/null || fail "put of small.bin failed"
as_alice files get small.bin "$TOOLS/small.back" 2> /dev/null || fail "get beside a planted symlink failed"
[ "$(cat "$TOOLS/victim")" = "not yours" ] || fail "files get wrote through a planted NAME.part symlink"
cmp -s "$TOOLS/small.bin" "$TOOLS/small.back" || fail "small.bin came back different"
! ls "$TOOLS"/small.back.part.* > /dev/null 2>&1 || fail "files get left a temp file"
rm -f "$TOOLS/small.back" "$TOOLS/small.back.part" "$TOOLS/victim"
as_alice files rm small.bin > /dev/null
pass "files get writes a new temp file: a planted NAME.part symlink is left alone"

# 1b. A quota: an upload that would not fit is refused with 413 and leaves nothing.
rmc users quota alice 250Mi 2> /dev/null
head -c $((100 << 20)) /dev/zero > "$TOOLS/more.bin"
set +e
ERR=$(as_alice files put "$TOOLS/more.bin" 2>&1); RC=$?
set -e
[ "$RC" = 2 ] && grep -q "quota: alice's files would use" <<<"$ERR" || fail "an upload over quota was not refused: $ERR"
! as_alice files ls | grep -q more.bin || fail "the refused upload left a file"
as_alice files du | grep -q "quota: 200.0 MiB used (your files and your jobs'), of 250.0 MiB" || fail "du: $(as_alice files du)"
rmc users quota alice none 2> /dev/null
pass "over quota: 413 with what it would take, nothing stored; du shows 200 of 250 MiB"

# 2. Others' files are not even confirmed to exist; datasets/ is admins'.
set +e
ERR=$(as_bob files cat users/alice/big.bin 2>&1); RC=$?
set -e
[ "$RC" != 0 ] && grep -q "users/alice/big.bin: no such file" <<<"$ERR" || fail "bob read alice's file: $ERR"
URL=$(jq -r .url "$DATA/server.json")
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $BOB" "$URL/api/v1/files/users/alice/big.bin")" = 404 ] ||
  fail "bob's GET of alice's file is not 404"
echo x > "$TOOLS/x.txt"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H "Authorization: Bearer $ALICE" --data-binary @"$TOOLS/x.txt" \
      "$URL/api/v1/files/datasets/x.txt")" = 403 ] || fail "alice wrote under datasets/"
set +e
ERR=$(as_alice files put "$TOOLS/x.txt" datasets/x.txt 2>&1); RC=$?
set -e
[ "$RC" = 2 ] && grep -q "datasets/ is writable by admins only" <<<"$ERR" || fail "the CLI did not say why: $ERR"
rmc files put "$TOOLS/x.txt" datasets/x.txt > /dev/null
[ "$(as_bob files cat datasets/x.txt)" = x ] || fail "bob cannot read datasets/"
pass "bob gets 404 for alice's file; alice gets 403 writing datasets/; everyone reads datasets/"

# 3. A directory, recursively, and removed again.
mkdir -p "$TOOLS/run/sub"
echo one > "$TOOLS/run/one.txt"
echo two > "$TOOLS/run/sub/two.txt"
as_alice files put "$TOOLS/run" results > /dev/null 2>&1
as_alice files get results "$TOOLS/back" 2> /dev/null
diff -r "$TOOLS/run" "$TOOLS/back" > /dev/null || fail "the directory came back different"
[ "$(as_alice files du results | cut -f2)" = "2 files" ] || fail "du: $(as_alice files du results)"
as_alice files rm -r results 2> /dev/null
[ -z "$(as_alice files ls results/)" ] || fail "rm -r left files"
pass "a directory round-trips recursively; du counts it; rm -r removes it"

# 4. (s3) The storage backend stops: 503 naming it, other calls still served; it returns: recovery.
if [ -n "$CEPH" ]; then
  RGW_PID=$(cat "$CEPH/run/client.rgw.a.pid")
  kill "$RGW_PID"
  for _ in $(seq 50); do kill -0 "$RGW_PID" 2> /dev/null || break; sleep 0.1; done
  BODY=$(curl -s -w ' %{http_code}' -H "Authorization: Bearer $BOB" "$URL/api/v1/files/datasets/x.txt")
  grep -q ' 503$' <<<"$BODY" && grep -q "storage backend s3" <<<"$BODY" || fail "with RGW down: $BODY"
  rmc nodes > /dev/null || fail "the server stopped serving other calls"
  CEPH_CONF=$CEPH/ceph.conf radosgw -n client.rgw.a
  for _ in $(seq 100); do
    [ "$(as_bob files cat datasets/x.txt 2> /dev/null)" = x ] && break
    sleep 0.1
  done
  [ "$(as_bob files cat datasets/x.txt)" = x ] || fail "no recovery after RGW returned"
  pass "RGW down: 503 naming the storage backend, the rest served; back: files served again"
fi
echo "files_test: all passed"
