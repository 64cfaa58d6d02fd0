# Processes named by pid *and* start time (field 22 of /proc/PID/stat, clock
# ticks since boot), so that a pid the kernel has since given to another
# process is never taken for one of the cluster's. Sourced by up.sh, down.sh
# and tests/e2e/cluster_test.sh. Each reads /proc/PID/stat once: a process
# that exits meanwhile is simply gone, never half-read.

# proc_stat PID: the fields of /proc/PID/stat from field 3 (the state) on;
# fails when there is no such process. The command name (field 2) may hold
# spaces and parentheses, so the fields start after the last ')'.
proc_stat() {
  local s
  s=$(cat "/proc/$1/stat" 2> /dev/null) || return 1
  [ -n "$s" ] || return 1
  echo "${s##*) }"
}

# proc_start PID: the start time of process PID.
proc_start() {
  local s f
  s=$(proc_stat "$1") || return 1
  read -r -a f <<< "$s"
  echo "${f[19]}"
}

# proc_running PID START: PID is still the process that started at START and
# has not exited (a zombie has: it holds nothing but its exit status).
proc_running() {
  local s f
  s=$(proc_stat "$1") || return 1
  read -r -a f <<< "$s"
  [ "${f[0]}" != Z ] && [ "${f[0]}" != X ] && [ "${f[19]}" = "$2" ]
}
