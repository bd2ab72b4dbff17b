-- wrk script: every request reserves a different code of a campaign (read from the campaign's
-- CSV download), for a new customer with a new orderId, so while codes last every request
-- should win (201). Usage:
--   wrk -t2 -c64 -d10s -s campaign-codes.lua http://127.0.0.1:3900 -- CODES.csv THREADS
-- Thread t of T takes the codes t, t+T, t+2T...; once its codes run out it starts over, and
-- those requests are refused (the codes are used): they count as "not 201".
local threads = {}
local next_thread = 0

function setup(thread)
  next_thread = next_thread + 1
  thread:set("tid", next_thread)
  table.insert(threads, thread)
end

function init(args)
  local file, count = args[1], tonumber(args[2] or "1")
  codes = {}
  local i = 0
  for line in io.lines(file) do
    local code = line:match("^([^,]+),")
    if code and code ~= "code" then
      if i % count == tid - 1 then
        table.insert(codes, code)
      end
      i = i + 1
    end
  end
  n = 0
  base = tid * 1000000000
  headers = { ["Content-Type"] = "application/json" }
end

function request()
  n = n + 1
  local code = codes[(n - 1) % #codes + 1]
  local customer = base + n
  local body = string.format('{"customerId":%d,"orderId":"c%d","orderAmount":500000}', customer, customer)
  return wrk.format("POST", "/vouchers/" .. code .. "/reservations", headers, body)
end

function response(status, headers, body)
  if status ~= 201 then
    bad = (bad or 0) + 1
  end
end

function done(summary, latency, requests)
  local refused = 0
  for _, t in ipairs(threads) do
    refused = refused + (t:get("bad") or 0)
  end
  io.write(string.format("not 201: %d of %d\n", refused, summary.requests))
end
