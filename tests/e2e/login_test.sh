#!/usr/bin/env bash
# `ringmaster login` keeps its token like `docker login`, and a user who is
# not an admin works from it alone, as the README shows: their files under
# users/<name>/ (datasets/ is the admins'), a job that takes them as input.
#  1. login keeps the token (0600 file in a 0700 dir under $XDG_CONFIG_HOME,
#     keyed by server URL), prints none; later commands need no flag at all;
#  2. the lookup order: --token, then RINGMASTER_TOKEN, then the login;
#  3. the non-admin flow: datasets/ refused, users/alice/ taken, a job stages it;
#  4. logging in again revokes the token it replaces;
#  5. a token revoked on the server says to log in again; --print-token keeps
#     nothing; a file others may read is refused;
#  6. logout revokes the token and removes the file; logged in to two servers,
#     a command without --server asks which.
source "$(dirname "$0")/lib.sh"

start_up
URL=$(jq -r .url "$DATA/server.json")
printf 'correct horse\n' | rmc users create alice --password-stdin > /dev/null 2>&1
# alice's CLI: a config dir of her own (rmc, the admin's, would otherwise
# find her login for this server before admin.token: a login comes first), and
# a data dir with neither server.json nor admin.token in it, so everything it
# knows comes from her login.
ALICE_DATA=$(mktemp -d "$DATA/alice.XXXXXX")
ALICE_CONFIG=$DATA/alice-config
CREDS=$ALICE_CONFIG/ringmaster/credentials.json
alice() { XDG_CONFIG_HOME=$ALICE_CONFIG "$RM" --data "$ALICE_DATA" "$@"; }
alice_with() { local t=$1; shift; RINGMASTER_TOKEN=$t alice "$@"; }  # alice_with TOKEN CMD...
token_ids() { rmc tokens ls --user alice | awk '{print $1}' | sort -n | tr '\n' ' '; }
expect_fail() {  # expect_fail PATTERN CMD...: CMD fails with PATTERN in its output
  local out rc pattern=$1
  shift
  set +e
  out=$("$@" 2>&1)
  rc=$?
  set -e
  [ "$rc" != 0 ] || fail "'$*' succeeded: $out"
  grep -qE -- "$pattern" <<<"$out" || fail "'$*' failed without '$pattern': $out"
}

# ---- 1. login keeps the token
expect_fail "no server given" alice whoami
OUT=$(printf 'correct horse\n' | alice --server "$URL/" login alice 2> "$DATA/login.err")
[ -z "$OUT" ] || fail "login printed on stdout: $OUT"
grep -q "logged in to $URL as alice" "$DATA/login.err" || fail "login said: $(cat "$DATA/login.err")"
[ "$(stat -c %a "$CREDS")" = 600 ] || fail "credentials file mode $(stat -c %a "$CREDS")"
[ "$(stat -c %a "$(dirname "$CREDS")")" = 700 ] || fail "credentials dir mode $(stat -c %a "$(dirname "$CREDS")")"
TOKEN1=$(jq -r --arg u "$URL" '.servers[$u].token' "$CREDS")
ID1=$(jq -r --arg u "$URL" '.servers[$u].token_id' "$CREDS")
[ -n "$TOKEN1" ] && [ "$TOKEN1" != null ] || fail "no token stored under $URL: $(jq -c 'del(..|.token?)' "$CREDS")"
alice whoami | grep -q '^alice (user, token scope submit)' || fail "alice whoami: $(alice whoami 2>&1)"
pass "login kept token $ID1 in $CREDS (0600, dir 0700, keyed by $URL) and printed nothing; whoami needs no flag"

# ---- 2. --token, then RINGMASTER_TOKEN, then the login
ADMIN=$(cat "$DATA/admin.token")
RINGMASTER_TOKEN=$ADMIN alice whoami | grep -q '^admin ' || fail "RINGMASTER_TOKEN did not come before the login"
RINGMASTER_TOKEN=nonsense alice --token "$ADMIN" whoami | grep -q '^admin ' || fail "--token did not come first"
pass "--token, then RINGMASTER_TOKEN, then the login"

# ---- 3. a user's own files, and a job that takes them
printf 'hello from alice\n' > "$TOOLS/greeting.txt"
expect_fail "datasets/ is writable by admins only" alice files put "$TOOLS/greeting.txt" datasets/greeting.txt
alice files put "$TOOLS/greeting.txt" greeting.txt > /dev/null
alice files ls | grep -q 'users/alice/greeting.txt' || fail "the upload is not under users/alice/: $(alice files ls)"
JOB=$(jq -n '{name: "greet", resources: {cpu: 0.1, memory: "16Mi"},
  inputs: [{from: "users/alice/greeting.txt", to: "in/greeting.txt"}], command: "cat in/greeting.txt"}' |
  alice submit --no-workdir -)
alice wait "$JOB" --timeout 60 > /dev/null || { alice show "$JOB"; fail "job $JOB did not succeed"; }
alice logs "$JOB" | grep -q 'hello from alice' || fail "job $JOB did not print its input: $(alice logs "$JOB")"
pass "as a user: datasets/ refused, users/alice/greeting.txt taken, job $JOB staged it"

# ---- 4. logging in again revokes the token it replaces
printf 'correct horse\n' | alice --server "$URL" login alice 2> /dev/null
ID2=$(jq -r --arg u "$URL" '.servers[$u].token_id' "$CREDS")
[ "$ID2" != "$ID1" ] || fail "a second login kept token $ID1"
[ "$(token_ids)" = "$ID2 " ] || fail "alice's tokens after a second login: $(token_ids), want $ID2"
expect_fail "invalid or revoked token" alice_with "$TOKEN1" whoami
pass "a second login replaced token $ID1 with $ID2 and revoked $ID1"

# ---- 5. revoked on the server; --print-token; a file others may read
rmc tokens revoke "$ID2" 2> /dev/null
expect_fail "log in again" alice whoami
OUT=$(printf 'correct horse\n' | alice --server "$URL" login --print-token alice)
[ "${#OUT}" -ge 20 ] && alice_with "$OUT" whoami | grep -q '^alice ' || fail "--print-token printed '$OUT'"
PRINTED=$(token_ids)  # the --print-token one alone: $ID2 was revoked
[ "$(jq -r --arg u "$URL" '.servers[$u].token_id' "$CREDS")" = "$ID2" ] || fail "--print-token changed the kept login"
chmod 644 "$CREDS"
expect_fail "chmod 600 $CREDS" alice whoami
chmod 600 "$CREDS"
pass "a revoked kept token says to log in again; --print-token keeps nothing; a 0644 file is refused"

# ---- 6. logout; two servers
printf 'correct horse\n' | alice --server "$URL" login alice 2> /dev/null
ID3=$(jq -r --arg u "$URL" '.servers[$u].token_id' "$CREDS")
TOKEN3=$(jq -r --arg u "$URL" '.servers[$u].token' "$CREDS")
# The same server under another name is another entry.
OTHER=${URL/127.0.0.1/localhost}
printf 'correct horse\n' | alice --server "$OTHER" login alice 2> /dev/null
expect_fail "logged in to several: pass --server URL" alice whoami
alice --server "$OTHER" logout 2> "$DATA/logout.err"
grep -q "logged out of $OTHER; token [0-9]* revoked" "$DATA/logout.err" || fail "logout said: $(cat "$DATA/logout.err")"
alice whoami | grep -q '^alice ' || fail "the remaining login does not work"
alice logout 2> "$DATA/logout.err"
grep -q "logged out of $URL; token $ID3 revoked" "$DATA/logout.err" || fail "logout said: $(cat "$DATA/logout.err")"
[ ! -e "$CREDS" ] || fail "logout left $CREDS: $(cat "$CREDS")"
[ -z "$(ls -A "$(dirname "$CREDS")")" ] || fail "logout left files: $(ls -A "$(dirname "$CREDS")")"
expect_fail "invalid or revoked token" alice_with "$TOKEN3" --server "$URL" whoami
[ "$(token_ids)" = "$PRINTED" ] || fail "alice's tokens after logging out everywhere: $(token_ids), want $PRINTED"
OUT=$(alice --server "$URL" logout 2>&1)
grep -q "not logged in to $URL" <<<"$OUT" || fail "a second logout said: $OUT"
pass "logout revoked tokens on both names of the server and removed the file; without --server it asked which"
echo "login_test: all passed"
