-- wrk script: reserves of codes that do not exist, drawn at random from a pool of POOL codes
-- (a bot's list of guesses; default 10,000), each answered 404. Usage:
--   wrk -t1 -c64 -d5s -s unknown-codes.lua http://127.0.0.1:3900 -- PREFIX [POOL]
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  prefix = args[1] or "NOPE"
  pool = tonumber(args[2] or "10000")
  math.randomseed(os.time())
  headers = { ["Content-Type"] = "application/json" }
  n = 0
end

function request()
  n = n + 1
  local path = string.format("/vouchers/%s%d/reservations", prefix, math.random(pool))
  local body = string.format('{"customerId":%d,"orderId":"u%d","orderAmount":500000}', n, n)
  return wrk.format("POST", path, headers, body)
end

function response(status, headers, body)
  if status ~= 404 then
    bad = (bad or 0) + 1
  end
end

function done(summary, latency, requests)
  local other = 0
  for _, t in ipairs(threads) do
    other = other + (t:get("bad") or 0)
  end
  io.write(string.format("not 404: %d of %d\n", other, summary.requests))
end
