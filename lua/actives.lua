-- Flashgate gate: the orders that hold a use in the gate, read in one step with `remaining`.
-- Writes nothing. Runs after entry.lua.
--
-- KEYS[1] remaining  KEYS[2] orders
-- Returns {remaining, orderId, customerId, orderId, customerId, ...} (remaining '' when the
-- voucher is not loaded).
local out = {redis.call('GET', KEYS[1]) or ''}
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  local e = entry_parse(all[i + 1])
  if e.state == 'A' then
    out[#out + 1] = all[i]
    out[#out + 1] = e.customer
  end
end
return out
