-- wrk script for bench/run.py: random paths from BENCH_PATHS, the API key, an optional body,
-- and a machine-readable summary line (BENCH_JSON {...}) for the runner to parse.
local paths = {}
for line in io.lines(os.getenv("BENCH_PATHS")) do
  if #line > 0 then paths[#paths + 1] = line end
end
local method = os.getenv("BENCH_METHOD") or "GET"
local body = nil
local body_file = os.getenv("BENCH_BODY")
if body_file and #body_file > 0 then
  local f = io.open(body_file, "r")
  body = f:read("*a")
  f:close()
end
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY")
if body then wrk.headers["Content-Type"] = "application/json" end

function init(args)
  math.randomseed(os.time() + math.floor(os.clock() * 1e6))
end

function request()
  return wrk.format(method, paths[math.random(#paths)], nil, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"errors":%d,"non2xx":%d,"p50_us":%d,"p99_us":%d}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99)))
end
