-- Flashgate gate: one bounded step through the `orders` hash, for the reconciler when the gate
-- holds more uses than Postgres (a release whose gate step failed). Writes nothing. Runs after
-- entry.lua. One call reads about ARGV[2] entries, so no call blocks Redis for longer as the
-- voucher's history grows; the caller goes on from the cursor it gets back.
--
-- KEYS[1] orders
-- ARGV[1] the cursor (0 to start)  ARGV[2] how many entries to read (HSCAN's COUNT)
-- Returns {cursor, orderId, customerId, orderId, customerId, ...}: the orders of this step that
-- hold a use; cursor '0' when the whole hash has been seen.
local step = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
local out = {step[1]}
local fields = step[2]
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 1) ~= '#' then
    local e = entry_parse(fields[i + 1])
    if e.state == 'A' then
      out[#out + 1] = fields[i]
      out[#out + 1] = e.customer
    end
  end
end
return out
