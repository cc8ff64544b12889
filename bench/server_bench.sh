#!/usr/bin/env bash
# Server benchmarks: sustained submissions over HTTP (wrk), `allot ls` with a filter over the
# resulting jobs, and p99 read latency while the loop cycles over the pending queue.
# Usage: bench/server_bench.sh [build dir] [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
secs=${2:-10}
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
"$build/src/cli/allot" up --port 0 --sim-nodes 11 --data "$dir/allot.db" \
  --addr-file "$dir/addr" --token-file "$dir/token" --tick-ms 1000 >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s "$dir/addr" ] && break; sleep 0.05; done
export ALLOT_ADDR=$(cat "$dir/addr") ALLOT_TOKEN=$(cat "$dir/token")
echo "== submissions (wrk -t2 -c64 -d${secs}s, durable group commit)"
wrk -t2 -c64 -d"${secs}s" -s bench/submit.lua "$ALLOT_ADDR" 2>"$dir/wrk.err"
echo "jobs in store: $(sqlite3 "$dir/allot.db" 'select count(*) from jobs' 2>/dev/null || echo '?')"
echo "== allot ls over all jobs with a filter (state=running, 50 rows)"
for _ in 1 2 3; do
  /usr/bin/time -f "allot ls --state running: %e s" "$build/src/cli/allot" ls --state running >/dev/null
done
echo "== read latency while cycling over the pending queue (wrk GET /api/v1/jobs/1/why)"
cat >"$dir/get.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $ALLOT_TOKEN"
LUA
wrk -t2 -c16 -d"${secs}s" --latency -s "$dir/get.lua" "$ALLOT_ADDR/api/v1/jobs/1/why" | grep -E "Latency|50%|99%|Requests/sec"
