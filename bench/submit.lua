-- wrk script: sustained job submissions over HTTP, each with a unique idempotency key.
-- Usage: ALLOT_TOKEN=... wrk -t2 -c64 -d10s -s bench/submit.lua http://127.0.0.1:PORT
-- ALLOT_BUDGETS (comma-separated, default /lab/default) spreads the jobs over budgets in turn.
local counter = 0
local token = os.getenv("ALLOT_TOKEN")
local budgets = {}
for b in string.gmatch(os.getenv("ALLOT_BUDGETS") or os.getenv("ALLOT_BUDGET") or "/lab/default",
                       "[^,]+") do
  table.insert(budgets, b)
end
local run = os.getenv("ALLOT_RUN") or tostring(os.time())
function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
end
function init(args)
  n = 0
end
function request()
  n = n + 1
  local body = string.format(
    '{"idempotency_key":"wrk-%s-%d-%d","budget":"%s","gpus_per_node":1,"expected_duration":3600}',
    run, tid, n, budgets[(n % #budgets) + 1])
  return wrk.format("POST", "/api/v1/jobs",
    {["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json"}, body)
end
function response(status, headers, body)
  if status ~= 201 and status ~= 200 then
    io.stderr:write("status " .. status .. ": " .. body .. "\n")
  end
end
