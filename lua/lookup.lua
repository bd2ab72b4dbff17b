-- Flashgate gate: read an order's entry and a customer's active uses, writing nothing. Runs
-- after entry.lua, so Rust never parses the entry's text.
--
-- KEYS[1] orders  KEYS[2] users   (see reserve.lua)
-- ARGV[1] orderId  ARGV[2] customerId ('' when only the order is wanted)
--
-- Returns {state, customer, reservedMs, expiresMs, discount, orderAmount, uses}: state is 'A'
-- (holds a use), 'R' (tombstone) or '' (no entry, the other fields then '' or '0'); uses is the
-- customer's active uses in the gate.
local uses = '0'
if ARGV[2] ~= '' then
  uses = redis.call('HGET', KEYS[2], ARGV[2]) or '0'
end
local e = entry_parse(redis.call('HGET', KEYS[1], ARGV[1]))
if not e then
  return {'', '', '0', '0', '0', '0', uses}
end
return {e.state, e.customer, e.reserved, e.expires, e.discount, e.amount, uses}
