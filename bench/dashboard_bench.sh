#!/usr/bin/env bash
# The dashboard under a large state: `allot up` with 128 simulated nodes (1,024 GPUs, all busy)
# and about 100,000 waiting jobs. Times each page in headless Chromium (tests/web/page_timing.mjs)
# and the requests behind them with curl. Figures: docs/benchmarks.md#dashboard.
#   [PAGES=/queue,/nodes] [RUNS=5] bench/dashboard_bench.sh [build dir] [jobs]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${1:-build}
want=${2:-100000}
allot="$root/$build/src/cli/allot"
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$dir"' EXIT

"$allot" up --nodes 0 --sim-nodes 128 --port 0 --data "$dir/allot.db" --addr-file "$dir/addr" \
  --token-file "$dir/token" --submit-rate 0 --max-waiting-jobs 0 >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 200); do [ -s "$dir/addr" ] && break; sleep 0.05; done
export ALLOT_ADDR=$(cat "$dir/addr") ALLOT_TOKEN=$(cat "$dir/token")
budgets=/lab/t0,/lab/t1,/lab/t2,/lab/t3,/lab/t4,/lab/t5,/lab/t6,/lab/t7,/lab/t8,/lab/t9
for b in ${budgets//,/ }; do "$allot" budget create "$b" --share 1 >/dev/null; done
export ALLOT_BUDGETS=$budgets
n=0
while [ "$(sqlite3 "$dir/allot.db" 'select count(*) from jobs')" -lt "$want" ]; do
  ALLOT_RUN="load$n" wrk -t2 -c64 -d2s -s bench/submit.lua "$ALLOT_ADDR" >/dev/null 2>&1
  n=$((n + 1))
done
sleep 3  # a cycle that explains the whole queue
echo "== machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== state: $(curl -s "$ALLOT_ADDR/api/v1/health")," \
  "$(sqlite3 "$dir/allot.db" "select count(*) from jobs where state='pending'") pending," \
  "$(sqlite3 "$dir/allot.db" "select count(*) from jobs where state='running'") running"
echo "== requests (curl, median of 5; time to the last byte)"
for path in / /app.js /api/v1/gpus "/api/v1/queue?limit=1" "/api/v1/queue?limit=500" \
    "/api/v1/queue?budget=/lab/t3&limit=500" "/api/v1/jobs?state=starting,running,preempting&limit=1000" \
    /api/v1/report "/api/v1/report?from=$(($(date +%s) - 86400))" "/api/v1/report?step=86400" \
    "/api/v1/report?from=$(($(date +%s) - 86400))&step=3600" \
    /api/v1/budgets; do
  for _ in 1 2 3 4 5; do
    curl -s -o /dev/null -w '%{time_total} %{size_download}\n' \
      -H "Authorization: Bearer $ALLOT_TOKEN" "$ALLOT_ADDR$path"
  done | sort -n | awk -v p="$path" 'NR == 3 { printf "  %-60s %7.1f ms %9d bytes\n", p, $1 * 1000, $2 }'
done
# What the cluster page's day-by-day chart read before GET /report?step=: a report a day, 7 of
# them one after another (median of 5 rounds).
for _ in 1 2 3 4 5; do
  now=$(date +%s) total=0
  for i in 0 1 2 3 4 5 6; do
    from=$((now - (7 - i) * 86400))
    t=$(curl -s -o /dev/null -w '%{time_total}' -H "Authorization: Bearer $ALLOT_TOKEN" \
      "$ALLOT_ADDR/api/v1/report?from=$from&to=$((from + 86400))")
    total=$(awk -v a="$total" -v b="$t" 'BEGIN { print a + b }')
  done
  echo "$total"
done | sort -n | awk 'NR == 3 { printf "  %-60s %7.1f ms\n", "7 x /api/v1/report (a day each)", $1 * 1000 }'
echo "== pages (headless Chromium: navigation until the page's content is shown)"
node tests/web/page_timing.mjs "$ALLOT_ADDR" "$ALLOT_TOKEN" "${RUNS:-5}" "${PAGES:-}"
