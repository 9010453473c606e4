-- wrk script for bench/run.py's webhook_deliveries: signed GitHub deliveries from BENCH_DELIVERIES
-- (lines "<X-Hub-Signature-256>\t<body>"), each request with a fresh X-GitHub-Delivery GUID (a reused
-- one would be answered from the first delivery), and the same BENCH_JSON summary line as wrk.lua.
local deliveries = {}
for line in io.lines(os.getenv("BENCH_DELIVERIES")) do
  local signature, body = line:match("^([^\t]+)\t(.+)$")
  if signature then deliveries[#deliveries + 1] = {signature, body} end
end
local event = os.getenv("BENCH_EVENT") or "check_run"

function init(args)
  math.randomseed(os.time() + math.floor(os.clock() * 1e6) + tonumber(tostring({}):match("0x(%x+)"), 16) % 100000)
end

function request()
  local d = deliveries[math.random(#deliveries)]
  local guid = string.format("%08x-%04x-%04x-%04x-%06x%06x", math.random(0, 0x7fffffff), math.random(0, 0xffff),
    math.random(0, 0xffff), math.random(0, 0xffff), math.random(0, 0xffffff), math.random(0, 0xffffff))
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["X-GitHub-Event"] = event,
    ["X-GitHub-Delivery"] = guid, ["X-Hub-Signature-256"] = d[1]}, d[2])
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"errors":%d,"non2xx":%d,"p50_us":%d,"p99_us":%d}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99)))
end
