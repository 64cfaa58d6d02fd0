#!/usr/bin/env bash
# `ringmaster top` on `ringmaster up`: --once (and a pipe) print one plain-text
# frame; the interactive view, run in a detached tmux session on a socket of
# the test's own, shows the node's row and a running job's row, quits on `q`
# and gives the terminal back (main screen, cursor, echo, canonical mode); with
# the server gone it shows the error, keeps going, and quits on Ctrl-C.
source "$(dirname "$0")/lib.sh"
command -v tmux > /dev/null || fail "tmux is not installed (scripts/install-deps.sh)"

TMUX_SOCK=$DATA/tmux.sock
# Never the user's tmux server or config: a private socket under $DATA.
tmx() { env -u TMUX tmux -S "$TMUX_SOCK" -f /dev/null "$@"; }
trap 'rc=$?; set +e; [ -S "$TMUX_SOCK" ] && tmx kill-server 2>/dev/null; (exit $rc); cleanup' EXIT

# pane_wait SESSION REGEX SECONDS: until the pane shows a line matching REGEX (a hang guard).
pane_wait() {
  for _ in $(seq 1 $(($3 * 5))); do
    tmx capture-pane -p -t "$1" > "$DATA/pane.txt" 2>/dev/null || true
    grep -Eq -- "$2" "$DATA/pane.txt" && return 0
    sleep 0.2
  done
  echo "---- pane $1 (waiting for /$2/):" >&2
  cat "$DATA/pane.txt" >&2
  return 1
}
# start_top SESSION [FLAG...]: `ringmaster top` in a 160x40 terminal; when it
# ends the pane says how, and what the terminal's modes are then.
start_top() {
  local session=$1
  shift
  local cmd
  cmd="$(printf '%q ' "$RM" --data "$DATA" top "$@"); echo TOP-EXITED rc=\$?;"
  cmd+=" echo STTY \$(stty -a | tr ' ;' '\\n\\n' | grep -xE -- '-?(icanon|echo|isig)' | tr '\\n' ' '); sleep 60"
  tmx new-session -d -s "$session" -x 160 -y 40 "$cmd"
}
pane_flag() { tmx display-message -p -t "$1" "#{$2}"; }

NODE=top-e2e-node
start_up --cpus 2 --memory 2Gi --ports 32600-32619 --node-name "$NODE"
SPEC='{"name": "top-sleeper", "command": ["sleep", "60"], "resources": {"cpu": 1, "memory": "64Mi"}}'
ID=$(echo "$SPEC" | rmc submit -)
wait_state "$ID" RUNNING 30
NODE_ROW="^$NODE +ready +\[.*\] +[0-9]+% +\[.*\] +[0-9.]+[BKMG]/2G +- +1$"
JOB_ROW="^ *$ID +admin +top-sleeper +RUNNING +1 "

# 1. Not a terminal (a pipe), or --once: one plain frame, exit 0.
for args in "--once" ""; do
  # shellcheck disable=SC2086
  FRAME=$(rmc top $args) || fail "top $args exited $?"
  grep -Eq "$NODE_ROW" <<<"$FRAME" || fail "top $args: no node row /$NODE_ROW/:
$FRAME"
  grep -Eq "$JOB_ROW" <<<"$FRAME" || fail "top $args: no job row /$JOB_ROW/:
$FRAME"
  grep -q "^nodes 1/1 ready  jobs 1 running, 0 pending (all users)$" <<<"$FRAME" ||
    fail "top $args header: $(head -2 <<<"$FRAME")"
  if grep -q $'\x1b' <<<"$FRAME"; then fail "top $args printed escape sequences"; fi
  WIDEST=$(awk '{ if (length($0) > w) w = length($0) } END { print w }' <<<"$FRAME")
  [ "$WIDEST" -le 80 ] || fail "top $args: a line of $WIDEST columns, not at most 80"
done
pass "top --once and top into a pipe print one plain frame of at most 80 columns with the node and job $ID"

# 2. The interactive view in a terminal: both rows, on the alternate screen; q quits and restores.
start_top view
pane_wait view "$NODE_ROW" 20 || fail "the node's row did not appear in 20 s"
pane_wait view "$JOB_ROW" 20 || fail "job $ID's row did not appear in 20 s"
grep -q 'q quits' "$DATA/pane.txt" || fail "no hint in the header: $(head -1 "$DATA/pane.txt")"
[ "$(pane_flag view alternate_on)" = 1 ] || fail "top is not on the alternate screen"
[ "$(pane_flag view cursor_flag)" = 0 ] || fail "top did not hide the cursor"
tmx send-keys -t view q
pane_wait view '^TOP-EXITED rc=0$' 10 || fail "top did not exit 0 within 10 s of q"
pane_wait view '^STTY isig icanon echo *$' 5 || fail "the terminal's modes were not restored"
[ "$(pane_flag view alternate_on)" = 0 ] || fail "the alternate screen was left on"
[ "$(pane_flag view cursor_flag)" = 1 ] || fail "the cursor was left hidden"
if grep -q "$NODE" "$DATA/pane.txt"; then fail "the frame stayed on the main screen: $(cat "$DATA/pane.txt")"; fi
pass "interactive top showed $NODE and job $ID, quit on q with exit 0, and restored the screen, cursor and modes"

# 3. The server goes away: top shows why, keeps retrying, and Ctrl-C quits it.
start_top gone --interval 0.5
pane_wait gone "$NODE_ROW" 20 || fail "the node's row did not appear in 20 s"
stop_up
pane_wait gone '^nodes: cannot reach the server' 10 || fail "no error line once the server was gone"
grep -q '^jobs: cannot reach the server' "$DATA/pane.txt" || fail "no jobs error line: $(cat "$DATA/pane.txt")"
sleep 1.5  # a few retries
tmx capture-pane -p -t gone > "$DATA/pane.txt"
if grep -q TOP-EXITED "$DATA/pane.txt"; then fail "top ended when the server went away"; fi
grep -q '^nodes: cannot reach the server' "$DATA/pane.txt" || fail "the error line went: $(cat "$DATA/pane.txt")"
tmx send-keys -t gone C-c
pane_wait gone '^TOP-EXITED rc=0$' 10 || fail "top did not exit 0 within 10 s of Ctrl-C"
pane_wait gone '^STTY isig icanon echo *$' 5 || fail "the terminal's modes were not restored after Ctrl-C"
set +e; FRAME=$(rmc top --once 2>&1); RC=$?; set -e
[ "$RC" = 2 ] || fail "top --once with no server exited $RC, not 2"
grep -q '^nodes: cannot reach the server' <<<"$FRAME" || fail "top --once with no server: $FRAME"
pass "with the server gone top showed the error and kept retrying, Ctrl-C quit it; --once exited 2"
echo "top_test: all passed"
