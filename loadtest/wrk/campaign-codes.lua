-- wrk script: every request reserves a different code of a campaign (read from the campaign's
-- CSV download), for a new customer with a new orderId, so while codes last every request
-- should win (201). Usage, from the repository's root:
--   wrk -t2 -c64 -d10s -s loadtest/wrk/campaign-codes.lua http://127.0.0.1:3900 -- CODES.csv THREADS
-- Thread t of T takes the codes t, t+T, t+2T...; once its codes run out it starts over, and
-- those requests are refused (the codes are used): they count as "not 201".
--
-- All but the choice of code is all-winners.lua's (its setup, response and done).
dofile("loadtest/wrk/all-winners.lua")

local winners_init = init

function init(args)
  winners_init({}) -- its counter, customers and headers
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
end

function request()
  n = n + 1
  local code = codes[(n - 1) % #codes + 1]
  local customer = base + n
  local body = string.format('{"customerId":%d,"orderId":"c%d","orderAmount":500000}', customer, customer)
  return wrk.format("POST", "/vouchers/" .. code .. "/reservations", headers, body)
end
