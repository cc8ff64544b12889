#!/usr/bin/env bash
# Shows that the performance gate (scripts/perf-gate) can fail: with the checked-in baseline of one
# cheap probe doctored to be 20% lower (so the real count reads as a 25% regression) it must exit
# non-zero and name the probe, both counts and the update command; doctored 40% higher (the code
# "got faster") it must pass with a stale-baseline warning. Each case measures the probe for real.
# Usage: perf_gate_test.sh SOURCE_DIR BUILD_DIR. Exit 77 (skipped) without valgrind.
set -uo pipefail
src=$1
build=$2
probe='submit_body/small_x1000'
command -v valgrind >/dev/null || { echo "valgrind not installed: skipped"; exit 77; }

base=$(awk -v p="$probe" '$1 == p { print $2 }' "$src/bench/perf-baseline.txt")
[ -n "$base" ] || { echo "FAIL: no line for $probe in bench/perf-baseline.txt"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

# check_case NAME FACTOR_PERCENT EXPECTED_EXIT EXPECTED_TEXT...
check_case() {
  local name=$1 factor=$2 want_rc=$3
  shift 3
  local doctored=$work/$name.txt
  awk -v p="$probe" -v f="$factor" '$1 == p { $2 = int($2 * f / 100) } { print }' \
    "$src/bench/perf-baseline.txt" >"$doctored"
  local rc=0
  "$src/scripts/perf-gate" --baseline "$doctored" --build-dir "$build" --only "^$probe\$" \
    >"$work/$name.out" 2>&1 || rc=$?
  if [ "$rc" != "$want_rc" ]; then
    echo "FAIL ($name): perf-gate exited $rc, expected $want_rc"
    failed=1
  fi
  for text in "$@"; do
    if ! grep -qF -- "$text" "$work/$name.out"; then
      echo "FAIL ($name): output lacks '$text'"
      failed=1
    fi
  done
  sed "s/^/  $name| /" "$work/$name.out"
}

lowered=$((base * 80 / 100))
check_case regression 80 1 "FAIL $probe" "baseline $lowered" "scripts/perf-gate --update"
check_case stale 140 0 "warning: $probe" "stale"
exit "$failed"
