-- wrk script: every request reserves for a new customer with a new orderId, so on a voucher
-- whose limit never runs out every request should win (201). One code: its reserve
-- (`POST /vouchers/{code}/reservations`); several: an order of those codes
-- (`POST /orders/{orderId}/reservations`). Usage:
--   wrk -t2 -c64 -d10s -s all-winners.lua http://127.0.0.1:3900 -- CODE [CODE...]
local threads = {}
local next_thread = 0

function setup(thread)
  next_thread = next_thread + 1
  thread:set("tid", next_thread)
  table.insert(threads, thread)
end

function init(args)
  code = args[1] or "ALLWIN"
  path = "/vouchers/" .. code .. "/reservations"
  if #args > 1 then
    local quoted = {}
    for i, c in ipairs(args) do
      quoted[i] = '"' .. c .. '"'
    end
    codes = table.concat(quoted, ",")
  end
  n = 0
  -- Distinct across threads (each run uses a voucher of its own).
  base = tid * 1000000000
  headers = { ["Content-Type"] = "application/json" }
end

function request()
  n = n + 1
  local customer = base + n
  if codes then
    local body = string.format('{"customerId":%d,"orderAmount":500000,"codes":[%s]}', customer, codes)
    -- An order's id is the service's, not a code's: named after the first code, so that
    -- every run (its codes of its own) orders anew.
    return wrk.format("POST", "/orders/" .. code .. "-" .. customer .. "/reservations", headers, body)
  end
  local body = string.format('{"customerId":%d,"orderId":"w%d","orderAmount":500000}', customer, customer)
  return wrk.format("POST", path, headers, body)
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
