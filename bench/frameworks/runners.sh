# How bench/frameworks/run.sh starts each framework (sourced by it; uses its
# on_host, addr, wait_workers, stop_servers, python_of, WORK, BUILD, BATCH).
# run_framework FRAMEWORK MODEL N prints "SAMPLES_PER_S IDLE_PCT LINK_MBIT", or nothing.

TIMEOUT=${TIMEOUT:-300}
HVD_SITE=${HVD_SITE:-$BUILD/bench/horovod/site}

result_of() {  # result_of LOG...: "samples/s idle% link-Mbit/s" from the JSON line of the worker that reports
  /usr/bin/python3 -c '
import json, sys
rows = [l for f in sys.argv[1:] for l in open(f) if l.startswith("{")]
r = json.loads(rows[-1])
print("%.1f %s %s" % (r["samples_per_s"], r["idle_pct"], r["link_mbit"]))' "$@" 2>/dev/null
}

# torch_run MODE MODEL N [ENV...]: one torch_worker.py per host, with ENV and RANK etc.
torch_run() {
  local mode=$1 model=$2 n=$3 i pids=()
  shift 3
  local args=(--model "$model" --batch "$BATCH" --steps "$(steps_of "$model")" --warmup "$(warmup_of "$model")")
  for ((i = 0; i < n; i++)); do
    on_host "$i" "$WORK/log.$i" -- env OMP_NUM_THREADS=1 PYTHONPATH="$BUILD/python:$HVD_SITE" \
      MASTER_ADDR="$(addr 0)" MASTER_PORT=29501 RANK=$i WORLD_SIZE="$n" GLOO_SOCKET_IFNAME=eth0 \
      RINGMASTER_TRANSPORT=tcp RINGMASTER_ADDR="$(addr "$i")" \
      HOROVOD_HOSTNAME="$(addr "$i")" HOROVOD_RANK=$i HOROVOD_SIZE="$n" HOROVOD_LOCAL_RANK=0 HOROVOD_LOCAL_SIZE=1 \
      HOROVOD_CROSS_RANK=$i HOROVOD_CROSS_SIZE="$n" "$@" \
      /usr/bin/python3 "$HERE/torch_worker.py" --mode "$mode" "${args[@]}"
    pids+=("$LAST_PID")
  done
  wait_workers "$TIMEOUT" "${pids[@]}" || { cat "$WORK/log.0" >&2; return 1; }
  result_of "$WORK/log.0"
}

run_horovod() {
  local model=$1 n=$2 port="" i
  [ -f "$HVD_SITE/horovod/torch/__init__.py" ] || { echo "horovod: not built (bench/frameworks/build_horovod.sh)" >&2; return 1; }
  local hosts=()
  for ((i = 0; i < n; i++)); do hosts+=("$(addr "$i")"); done
  on_host 0 "$WORK/rdv" -- env PYTHONPATH="$HVD_SITE" /usr/bin/python3 "$HERE/hvd_rendezvous.py" "${hosts[@]}"
  local rdv=$LAST_PID
  for ((i = 0; i < 150; i++)); do
    port=$(head -1 "$WORK/rdv" | grep -E '^[0-9]+$' || true)
    [ -n "$port" ] && break
    sleep 0.2
  done
  [ -n "$port" ] || { cat "$WORK/rdv" >&2; stop_servers "$rdv"; return 1; }
  torch_run horovod "$model" "$n" HOROVOD_GLOO_RENDEZVOUS_ADDR="$(addr 0)" HOROVOD_GLOO_RENDEZVOUS_PORT="$port" \
    HOROVOD_CONTROLLER=gloo HOROVOD_CPU_OPERATIONS=gloo HOROVOD_GLOO_IFACE=eth0 HOROVOD_GLOO_TIMEOUT_SECONDS=120
  local rc=$?
  stop_servers "$rdv"
  return $rc
}

# ringmaster-train: throughput between its step records (every 50 steps):
# the first at step 50 ends the warm-up, the last is STEPS later.
run_rmtrain() {
  local model=$1 n=$2 i pids=() steps
  steps=$(steps_of "$model")
  local bin=$BUILD/src/train/ringmaster-train
  [ -x "$bin" ] || return 1
  for ((i = 0; i < n; i++)); do
    local env=(env OMP_NUM_THREADS=1)
    [ "$n" -gt 1 ] && env+=(RINGMASTER_STORE="$(addr 0):29502" RANK=$i WORLD_SIZE="$n" RINGMASTER_ADDR="$(addr "$i")")
    rm -rf "$WORK/ckpt.$i" "$WORK/metrics.$i"
    on_host "$i" "$WORK/log.$i" -- "${env[@]}" "$bin" --model "$model" --batch-size "$BATCH" --threads 1 \
      --epochs 1 --max-steps $((50 + steps)) --schedule constant --progress none --data-dir "$WORK/data" \
      --checkpoint-dir "$WORK/ckpt.$i" --output-dir "$WORK/out.$i" --metrics-file "$WORK/metrics.$i"
    pids+=("$LAST_PID")
  done
  # The machine's CPU between the first and the last step record.
  local t1="" t2="" end=$((SECONDS + TIMEOUT))
  while [ -z "$t2" ] && [ $SECONDS -lt $end ] && kill -0 "${pids[0]}" 2>/dev/null; do
    local last
    last=$(grep -c '"kind":"step"' "$WORK/metrics.0" 2>/dev/null || true)
    [ -z "$t1" ] && [ "${last:-0}" -ge 1 ] && t1="$(cpu_ticks) $(link_bytes 0) $(date +%s.%N)"
    [ "${last:-0}" -ge $((1 + steps / 50)) ] && t2="$(cpu_ticks) $(link_bytes 0) $(date +%s.%N)"
    sleep 0.05
  done
  wait_workers "$TIMEOUT" "${pids[@]}" || { cat "$WORK/log.0" >&2; return 1; }
  /usr/bin/python3 -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if "\"step\"" in l]
recs = [r for r in recs if r.get("kind") == "step"]
n, b = int(sys.argv[2]), int(sys.argv[3])
t = lambda r: r["step"] * b * n / r["samples_per_s"]   # seconds since the epoch began
a, z = recs[0], recs[-1]
(b1, t1, x1, r1, s1), (b2, t2, x2, r2, s2) = [map(float, s.split()) for s in sys.argv[4:6]]
print("%.1f %.1f %.1f" % ((z["step"] - a["step"]) * b * n / (t(z) - t(a)), 100 - 100 * (b2 - b1) / max(1, t2 - t1),
                          max(x2 - x1, r2 - r1) * 8 / (s2 - s1) / 1e6))' \
    "$WORK/metrics.0" "$n" "$BATCH" "$t1" "$t2"
}

link_bytes() { ip netns exec "${TAG}h$1" cat /sys/class/net/eth0/statistics/tx_bytes /sys/class/net/eth0/statistics/rx_bytes | tr '\n' ' '; }
cpu_ticks() { awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print t - $5 - $6, t }' /proc/stat; }

run_tf() {  # run_tf ring|ps MODEL N
  local mode=$1 model=$2 n=$3 py i pids=() servers=() workers="" dir
  python_of tensorflow "${TF_PYTHON:-}"; py=$PY_PREFIX
  [ -n "$py" ] || { echo "tf: no tensorflow image ($IMAGES/tensorflow.rootfs) and no TF_PYTHON" >&2; return 1; }
  dir=$(script_dir)
  local args=(--model "$model" --batch "$BATCH" --steps "$(steps_of "$model")" --warmup "$(warmup_of "$model")")
  local env=(env OMP_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2 GRPC_ENABLE_FORK_SUPPORT=0 no_proxy='*')
  for ((i = 0; i < n; i++)); do workers+="${workers:+,}\"$(addr "$i"):2222\""; done
  if [ "$mode" = ring ]; then
    for ((i = 0; i < n; i++)); do
      # shellcheck disable=SC2086
      on_host "$i" "$WORK/log.$i" $py "${env[@]}" \
        TF_CONFIG="{\"cluster\":{\"worker\":[$workers]},\"task\":{\"type\":\"worker\",\"index\":$i}}" \
        "$PY_BIN" "$dir/tf_worker.py" --mode ring "${args[@]}"
      pids+=("$LAST_PID")
    done
  else
    local cluster="{\"chief\":[\"$(addr ps):2230\"],\"ps\":[\"$(addr ps):2231\"],\"worker\":[$workers]}"
    for i in ps $(seq 0 $((n - 1))); do
      local type=worker index=$i
      [ "$i" = ps ] && { type=ps; index=0; }
      # shellcheck disable=SC2086
      on_host "$i" "$WORK/srv.$i" $py "${env[@]}" \
        TF_CONFIG="{\"cluster\":$cluster,\"task\":{\"type\":\"$type\",\"index\":$index}}" \
        "$PY_BIN" "$dir/tf_worker.py" --mode ps "${args[@]}"
      servers+=("$LAST_PID")
    done
    # shellcheck disable=SC2086
    on_host ps "$WORK/log.0" $py "${env[@]}" TF_CONFIG="{\"cluster\":$cluster,\"task\":{\"type\":\"chief\",\"index\":0}}" \
      "$PY_BIN" "$dir/tf_worker.py" --mode ps "${args[@]}"
    pids+=("$LAST_PID")
  fi
  local rc=0
  wait_workers "$TIMEOUT" "${pids[@]}" || { tail -30 "$WORK/log.0" >&2; rc=1; }
  stop_servers "${servers[@]}"
  [ $rc = 0 ] && result_of "$WORK/log.0"
}

run_mxnet() {  # run_mxnet MODEL N
  local model=$1 n=$2 py i pids=() servers=() dir
  python_of mxnet "${MX_PYTHON:-}"; py=$PY_PREFIX
  [ -n "$py" ] || { echo "mxnet: no mxnet image ($IMAGES/mxnet.rootfs) and no MX_PYTHON" >&2; return 1; }
  dir=$(script_dir)
  local args=(--model "$model" --batch "$BATCH" --steps "$(steps_of "$model")" --warmup "$(warmup_of "$model")")
  local env=(env OMP_NUM_THREADS=1 MXNET_CPU_WORKER_NTHREADS=1 DMLC_PS_ROOT_URI="$(addr ps)" DMLC_PS_ROOT_PORT=9091
             DMLC_NUM_SERVER=1 DMLC_NUM_WORKER="$n" DMLC_INTERFACE=eth0)
  for role in scheduler server; do
    # shellcheck disable=SC2086
    on_host ps "$WORK/srv.$role" $py "${env[@]}" DMLC_ROLE=$role DMLC_NODE_HOST="$(addr ps)" \
      "$PY_BIN" "$dir/mx_worker.py" --mode dist_sync "${args[@]}"
    servers+=("$LAST_PID")
  done
  for ((i = 0; i < n; i++)); do
    # shellcheck disable=SC2086
    on_host "$i" "$WORK/log.$i" $py "${env[@]}" DMLC_ROLE=worker DMLC_NODE_HOST="$(addr "$i")" \
      "$PY_BIN" "$dir/mx_worker.py" --mode dist_sync "${args[@]}"
    pids+=("$LAST_PID")
  done
  local rc=0
  wait_workers "$TIMEOUT" "${pids[@]}" || { tail -30 "$WORK/log.0" >&2; rc=1; }
  stop_servers "${servers[@]}"
  # ps-lite numbers the workers in the order they register: rank 0, which reports, may be on any host.
  [ $rc = 0 ] && result_of "$WORK"/log.*
}

# single_py RUNTIME WORKER MODEL: the runtime's single-worker baseline on host 0.
single_py() {
  local image=$1 direct=$2 worker=$3 model=$4 py dir
  python_of "$image" "$direct"; py=$PY_PREFIX
  [ -n "$py" ] || { echo "$image: no image and no python" >&2; return 1; }
  dir=$(script_dir)
  # shellcheck disable=SC2086
  on_host 0 "$WORK/log.0" $py env OMP_NUM_THREADS=1 MXNET_CPU_WORKER_NTHREADS=1 TF_CPP_MIN_LOG_LEVEL=2 \
    "$PY_BIN" "$dir/$worker" --mode single --model "$model" --batch "$BATCH" --steps "$(steps_of "$model")" \
    --warmup "$(warmup_of "$model")"
  wait_workers "$TIMEOUT" "$LAST_PID" || { tail -30 "$WORK/log.0" >&2; return 1; }
  result_of "$WORK/log.0"
}

run_framework() {  # run_framework FRAMEWORK MODEL N
  local fw=$1 model=$2 n=$3
  rm -f "$WORK"/log.*
  case "$fw/$n" in
    ringmaster-train/*) run_rmtrain "$model" "$n" ;;
    ddp-ringmaster/1 | ddp-gloo/1 | horovod/1) torch_run single "$model" 1 ;;
    ddp-ringmaster/*) torch_run ringmaster "$model" "$n" ;;
    ddp-gloo/*) torch_run gloo "$model" "$n" ;;
    horovod/*) run_horovod "$model" "$n" ;;
    tf-ring/1 | tf-ps/1) single_py tensorflow "${TF_PYTHON:-}" tf_worker.py "$model" ;;
    tf-ring/*) run_tf ring "$model" "$n" ;;
    tf-ps/*) run_tf ps "$model" "$n" ;;
    mxnet-ps/1) single_py mxnet "${MX_PYTHON:-}" mx_worker.py "$model" ;;
    mxnet-ps/*) run_mxnet "$model" "$n" ;;
    *) echo "frameworks: unknown framework $fw" >&2; return 1 ;;
  esac
}
