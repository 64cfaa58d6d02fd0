# Shell helpers for the job benchmarks that drive a `ringmaster server` over
# its REST API with curl (bench/e2e_jobs, bench/slurm_jobs): sourced, not run.
# They read the caller's globals: URL and TOKEN (the server and an admin
# token), CLIENTS (concurrent curl processes).

# ms: now, in ms since the epoch (no fork).
ms() { local t=${EPOCHREALTIME/./}; echo "${t:0:13}"; }
# pct P: the P-th percentile (nearest rank) of the numbers on stdin.
pct() { sort -n | awk -v p="$1" '{a[NR] = $1} END {i = int(NR * p / 100 + 0.999); if (i < 1) i = 1; print (NR ? a[i] : "-")}'; }
# rate N MS: N per second over MS milliseconds.
rate() { echo "scale=1; $1 * 1000 / $2" | bc; }

# await_server DATA PID LOG: until the server writing DATA answers /healthz;
# sets URL (refused unless loopback) and TOKEN (its admin token).
await_server() {
  local data=$1 pid=$2 log=$3
  for _ in $(seq 100); do
    [ -f "$data/server.json" ] && curl -sf "$(jq -r .url "$data/server.json")/healthz" > /dev/null && break
    kill -0 "$pid" 2> /dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  URL=$(jq -r .url "$data/server.json")
  case $URL in http://127.0.0.1:*) ;; *) echo "server is not on 127.0.0.1: $URL" >&2; exit 1 ;; esac
  TOKEN=$(cat "$data/admin.token")
}

# submit N SPEC PREFIX: N jobs from $CLIENTS curl processes, each one keep-alive
# connection; "{"id":ID} CODE SECONDS" lines in PREFIX.all.
submit() {
  local n=$1 spec=$2 prefix=$3 k per pids=()
  printf '%s' "$spec" > "$prefix.json"
  for k in $(seq 0 $((CLIENTS - 1))); do
    per=$(( n / CLIENTS + (k < n % CLIENTS ? 1 : 0) ))
    [ "$per" -gt 0 ] || continue
    { echo "header = \"Authorization: Bearer $TOKEN\""
      echo 'header = "Content-Type: application/json"'
      echo "data-binary = \"@$prefix.json\""
      echo 'write-out = " %{http_code} %{time_total}\n"'
      for _ in $(seq "$per"); do echo "url = \"$URL/api/v1/jobs\""; done
    } > "$prefix.$k.cfg"
    curl -s -K "$prefix.$k.cfg" > "$prefix.$k.out" &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k"; done
  cat "$prefix".*.out > "$prefix.all"
}

# accepted_ids PREFIX N: the ids submit() got into PREFIX.ids, sorted; fails unless all N were accepted.
accepted_ids() {
  grep -o '"id":[0-9]*' "$1.all" | cut -d: -f2 | sort -n > "$1.ids"
  [ "$(wc -l < "$1.ids")" = "$2" ] && return 0
  echo "only $(wc -l < "$1.ids") of $2 submits accepted ($(awk '$2 != 201' "$1.all" | wc -l) refused)" >&2
  head -3 "$1.all" >&2
  exit 1
}

# await_ended IDFILE NAME [SECONDS]: until the last job of IDFILE and then every job named NAME has ended.
await_ended() {
  local last s n i
  last=$(tail -1 "$1")
  for i in $(seq $(( ${3:-300} * 2 ))); do
    s=$(curl -s -H "Authorization: Bearer $TOKEN" "$URL/api/v1/jobs/$last" | jq -r .state)
    case $s in SUCCEEDED|FAILED|CANCELLED) break ;; esac
    sleep 0.5
  done
  for _ in $(seq 120); do
    n=$(curl -s -H "Authorization: Bearer $TOKEN" "$URL/api/v1/jobs?limit=10000" |
        jq --arg name "$2" '[.jobs[] | select(.name == $name and (.state | IN("SUCCEEDED", "FAILED", "CANCELLED") | not))] | length')
    [ "$n" = 0 ] && break
    sleep 0.5
  done
}

# get_jobs IDFILE OUT: every job's full record, one JSON per line.
get_jobs() {
  { echo "header = \"Authorization: Bearer $TOKEN\""; echo 'write-out = "\n"'
    sed "s|.*|url = \"$URL/api/v1/jobs/&\"|" "$1"; } > "$2.cfg"
  curl -s -K "$2.cfg" | grep -v '^$' > "$2"
}

# job_times JSONL: per job, tab-separated, ms since the epoch: id, created,
# job SCHEDULED, first task RUNNING report (empty if the first report was its
# exit), task finished, job finished, state.
job_times() {
  jq -r '
    def t2: if . == null or . == "" then "" else ((.[0:19] + "Z") | fromdate) * 1000 + (.[20:23] | tonumber) end;
    [ .id, (.created_at | t2),
      ([.events[] | select(has("rank") | not) | select(.to == "SCHEDULED")][0].time | t2),
      ([.events[] | select(has("rank")) | select(.to == "RUNNING")][0].time | t2),
      (.tasks[0].finished_at | t2), (.finished_at | t2), .state ] | @tsv' "$1"
}
