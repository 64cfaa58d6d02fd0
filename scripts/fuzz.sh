#!/usr/bin/env bash
# `make fuzz`: builds every fuzz target (rm_fuzz_target in CMake) with clang,
# libFuzzer, ASan and UBSan in build-fuzz/, then runs each for FUZZ_SECONDS
# (default 60), FUZZ_JOBS at a time, starting from its seeds in
# tests/fuzz/corpus/<name>. Inputs that reach new code are kept in
# build-fuzz/corpus/<name>; a crash, leak, timeout or UB report leaves its
# input in build-fuzz/findings/<name>/ and fails the run. Once the bug is
# fixed, copy that input into tests/fuzz/regressions/<name>/: `make test`
# replays it from then on (CTest fuzz.<name>).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-$(nproc)}
B=${FUZZ_BUILD:-build-fuzz}

CC=clang CXX=clang++ cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRM_FUZZ=ON > "$B.configure.log" 2>&1 ||
  { cat "$B.configure.log"; exit 1; }
mapfile -t TARGETS < <(sort -u "$B/fuzz_targets.txt")
[ ${#TARGETS[@]} -gt 0 ] || { echo "fuzz: no fuzz targets configured" >&2; exit 1; }
cmake --build "$B" -j "$JOBS" --target "${TARGETS[@]/#/fuzz_}"

run_one() {
  local t=$1 b=$2 secs=$3
  mkdir -p "$b/corpus/$t" "$b/findings/$t" "tests/fuzz/corpus/$t"
  if "$b/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=1048576 \
       -artifact_prefix="$b/findings/$t/" -print_final_stats=1 \
       "$b/corpus/$t" "tests/fuzz/corpus/$t" > "$b/fuzz-$t.log" 2>&1; then
    echo "fuzz $t: $(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$b/fuzz-$t.log" | grep -Eo '[0-9]+$') runs in ${secs}s, no finding"
  else
    echo "fuzz $t: FINDING (see $b/fuzz-$t.log and $b/findings/$t/)"
    grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==' "$b/fuzz-$t.log" | head -5
    return 1
  fi
}
export -f run_one
printf '%s\n' "${TARGETS[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one "$@"' _ {} "$B" "$SECS"
echo "fuzz: ${#TARGETS[@]} targets ran ${SECS}s each with no finding"
