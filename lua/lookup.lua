-- Flashgate gate: read an order's entry and a customer's active uses, writing nothing. Runs
-- after entry.lua, so Rust never parses the entry's text, and incarnation.lua.
--
-- KEYS[1] orders  KEYS[2] users  KEYS[3] meta   (see reserve.lua)
-- ARGV[1] orderId  ARGV[2] customerId ('' when only the order is wanted)
-- ARGV[3] '1': say whether the gate can be trusted to know every order it granted; '' not asked
--         (the sold-out short cut, which must stay cheap)
--
-- Returns {state, customer, reservedMs, expiresMs, discount, orderAmount, uses, perUser, trust,
-- version}:
-- state is 'A' (holds a use), 'R' (tombstone) or '' (no entry, the other fields then '' or '0');
-- uses is the customer's active uses in the gate, perUser the voucher's per-user limit ('' when
-- the voucher is not loaded); trust is 'intact' (loaded into the very copy of the data the
-- script runs on), 'suspect' (loaded, but Redis failed over or restarted since: the last
-- grants before that may be lost), 'unloaded', or '' when not asked; version is the entry's
-- rules version ('' when it has none).
local uses = '0'
if ARGV[2] ~= '' then
  uses = redis.call('HGET', KEYS[2], ARGV[2]) or '0'
end
local per_user = redis.call('HGET', KEYS[3], 'per_user') or ''
local trust = ''
if ARGV[3] == '1' then
  if redis.call('EXISTS', KEYS[3]) == 0 then
    trust = 'unloaded'
  elseif redis.call('HGET', KEYS[3], 'replid') == incarnation() then
    trust = 'intact'
  else
    trust = 'suspect'
  end
end
local e = entry_parse(redis.call('HGET', KEYS[1], ARGV[1]))
if not e then
  return {'', '', '0', '0', '0', '0', uses, per_user, trust, ''}
end
return {e.state, e.customer, e.reserved, e.expires, e.discount, e.amount, uses, per_user, trust,
        e.version}
