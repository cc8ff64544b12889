#!/usr/bin/env bash
# Server benchmarks (figures in docs/benchmarks.md, "Server"):
#   1. sustained submissions over HTTP, durable (wrk + bench/submit.lua), with the server's CPU
#      time per request (from /proc, so that a busy machine shows in the rate, not in the cost);
#   2. `allot ls` with a filter over 100,000 jobs (the whole CLI process, and the request alone);
#   3. read latency (p50/p99) while the loop cycles over 10,000 pending jobs.
# Each part starts its own `allot up` (embedded SQLite store, WAL, synchronous=FULL, group
# commit; 11 simulated nodes x 8 H100 instead of agents, so nearly every job stays pending and no
# process runs).
# Usage: bench/server_bench.sh [build dir] [seconds] [connections]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${1:-build}
secs=${2:-10}
conns=${3:-64}
allot="$root/$build/src/cli/allot"
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$dir"' EXIT
budgets=/lab/t0,/lab/t1,/lab/t2,/lab/t3,/lab/t4,/lab/t5,/lab/t6,/lab/t7,/lab/t8,/lab/t9

start() {  # a fresh allot up in $dir/$1
  mkdir -p "$dir/$1"
  "$allot" up --nodes 0 --sim-nodes 11 --port 0 --data "$dir/$1/allot.db" --addr-file "$dir/$1/addr" \
    --token-file "$dir/$1/token" --tick-ms 1000 >"$dir/$1/log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do [ -s "$dir/$1/addr" ] && break; sleep 0.05; done
  export ALLOT_ADDR=$(cat "$dir/$1/addr") ALLOT_TOKEN=$(cat "$dir/$1/token")
  for b in ${budgets//,/ }; do "$allot" budget set "$b" --share 1 >/dev/null; done
  export ALLOT_BUDGETS=$budgets
}
stop() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
# CPU ticks per thread: "tid name ticks" (threads are named allot-http: the epoll loops,
# allot-api: workers for requests other than submissions, allot-store, allot-loop; allot-accept
# with HTTPS).
thread_ticks() {
  for t in /proc/"$pid"/task/*; do
    echo "$(basename "$t") $(cat "$t/comm") $(awk '{print $14 + $15}' "$t/stat")"
  done | sort
}
jobs_in() { sqlite3 "$dir/$1/allot.db" 'select count(*) from jobs'; }
# Submits until the store holds $2 jobs.
load() {
  local n=0
  while [ "$(jobs_in "$1")" -lt "$2" ]; do
    ALLOT_RUN="load$n" wrk -t2 -c"$conns" -d2s -s bench/submit.lua "$ALLOT_ADDR" >/dev/null 2>&1
    n=$((n + 1))
  done
}

echo "== machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== 1. submissions (wrk -t2 -c$conns -d${secs}s, durable group commit)"
start submit
t0=$(cpu_ticks)
thread_ticks >"$dir/threads0"
wrk -t2 -c"$conns" -d"${secs}s" --latency -s bench/submit.lua "$ALLOT_ADDR" >"$dir/wrk.out" 2>"$dir/wrk.err"
t1=$(cpu_ticks)
thread_ticks >"$dir/threads1"
grep -E "Requests/sec|requests in|50%|99%|Socket errors" "$dir/wrk.out"
n=$(awk '/requests in/ {print $1}' "$dir/wrk.out")
echo "server CPU: $(( (t1 - t0) * 10 )) ms for $n submissions = $(( (t1 - t0) * 10000 / n )) us per submission"
join "$dir/threads0" "$dir/threads1" | awk -v n="$n" '{ c[$4] += $5 - $3 }
  END { for (k in c) if (c[k] > 0) printf "  %-13s %6.1f us per submission\n", k, c[k] * 10000 / n }'
echo "jobs in store: $(jobs_in submit); errors: $(wc -l <"$dir/wrk.err")"
stop

echo "== 2. allot ls with a filter over 100,000 jobs"
start ls
"$allot" budget set /lab/rare --share 1 >/dev/null  # no job: the filter matches nothing
load ls 100000
echo "jobs in store: $(jobs_in ls)"
for q in "--state pending --budget /lab/t3" "--state pending --budget /lab" \
         "--state pending --budget /lab/rare" "--state running" \
         "--state pending,running --owner admin --budget /lab/t7"; do
  for _ in 1 2 3; do
    /usr/bin/time -f "allot ls $q: %e s (whole process)" "$allot" ls $q >/dev/null
  done
done
for q in "state=pending&budget=/lab/t3" "state=pending&budget=/lab" "state=pending&budget=/lab/rare"; do
  for _ in 1 2 3; do
    curl -s -o /dev/null -w "GET /jobs?$q&order=desc&limit=50: %{time_total} s\n" \
      -H "Authorization: Bearer $ALLOT_TOKEN" "$ALLOT_ADDR/api/v1/jobs?$q&order=desc&limit=50"
  done
done
stop

echo "== 3. read latency while the loop cycles over 10,000 pending jobs"
start read
load read 10000
echo "jobs in store: $(jobs_in read)"
curl -s -H "Authorization: Bearer $ALLOT_TOKEN" "$ALLOT_ADDR/api/v1/health"; echo
cat >"$dir/get.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $ALLOT_TOKEN"
LUA
for path in /api/v1/jobs/5000/why /api/v1/jobs/5000 "/api/v1/jobs?state=pending&limit=50"; do
  echo "-- GET $path (wrk -t2 -c16 -d${secs}s)"
  wrk -t2 -c16 -d"${secs}s" --latency -s "$dir/get.lua" "$ALLOT_ADDR$path" |
    grep -E "Requests/sec|50%|99%"
done
curl -s -H "Authorization: Bearer $ALLOT_TOKEN" "$ALLOT_ADDR/api/v1/health"; echo
stop
