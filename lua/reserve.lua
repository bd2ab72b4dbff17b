-- Flashgate gate: reserve one use of a flash-sale voucher, atomically. Runs after entry.lua,
-- rules.lua and incarnation.lua.
--
-- KEYS[1] voucher:{CODE}:meta       hash: the voucher's rules and money budget left (rules.lua)
-- KEYS[2] voucher:{CODE}:remaining  string: uses left
-- KEYS[3] voucher:{CODE}:users      hash: customerId -> active uses
-- KEYS[4] voucher:{CODE}:orders     hash: orderId -> order entry (entry.lua)
-- KEYS[5] voucher:{CODE}:pending    zset: orderId -> reservedMs, until Postgres has the row
-- KEYS[6] a campaign's code only: campaign:{campaign:ID}:codes, hash: CODE -> uses held,
--         CODE|customerId -> that customer's uses of the code (shared/src/gate/keys.rs). The
--         other keys are then the campaign's, one set for all its codes: `remaining` and
--         `users` count over the campaign, and orders are `CODE|orderId`
-- ARGV[1] customerId (decimal string)  ARGV[2] orderId (CODE|orderId in a campaign's gate)
-- ARGV[3] orderAmount  ARGV[4] now (ms)  ARGV[5] the campaign's code (with KEYS[6] only)
--
-- Returns {outcome, customerId, reservedMs, expiresMs, discount, version} as strings, `version`
-- being the voucher's version whose rules granted the use ('' when not known: an entry written
-- before the gate kept it, or no use held). Outcomes are the
-- service's reserve vocabulary (the same words as fg_reserve and the HTTP errors):
-- RESERVED, REPLAY (same customer, active, same orderAmount), ORDER_CONFLICT,
-- ORDER_AMOUNT_MISMATCH (same customer, another orderAmount), RESERVATION_RELEASED (tombstone),
-- NOT_LOADED, SUSPECT, and rules.lua's refusals.
--
-- SUSPECT: the use would be granted, but this node is not the copy of Redis' data the gate was
-- loaded into (meta's `replid`, load.lua). A failover promotes a replica that may lack the last
-- grants its primary acknowledged, `remaining` included: granting from it could hand out a use
-- twice, and in mode B the consumer would revoke a 201. Nothing is written; the caller repairs
-- the gate (load.lua) once the lost grants have landed, then asks again. Only a grant asks (one
-- INFO call): replays and refusals cost nothing more.
-- The clock is an argument so that every caller, and every test, decides with the same time.
local customer, order = ARGV[1], ARGV[2]
local amount, now = tonumber(ARGV[3]), tonumber(ARGV[4])

-- A retry answers from its entry, whatever the rules are now.
local e = entry_parse(redis.call('HGET', KEYS[4], order))
if e then
  if e.customer ~= '' and e.customer ~= customer then
    return {'ORDER_CONFLICT', e.customer, '0', '0', '0', ''}
  end
  if e.state == 'R' then
    return {'RESERVATION_RELEASED', e.customer, '0', '0', '0', ''}
  end
  -- A retry is the same request again: one with another amount would get a discount decided
  -- for the first (minimum order, discount <= order never checked for it). An entry written
  -- before the gate kept the amount reads '0' and is not compared.
  if e.amount ~= '0' and tonumber(e.amount) ~= amount then
    return {'ORDER_AMOUNT_MISMATCH', e.customer, '0', '0', '0', ''}
  end
  return {'REPLAY', e.customer, e.reserved, e.expires, e.discount, e.version}
end

local r = rules_read(KEYS[1])
local remaining = redis.call('GET', KEYS[2])
if not r or not remaining then
  return {'NOT_LOADED', '', '0', '0', '0', ''}
end
local uses = tonumber(redis.call('HGET', KEYS[3], customer) or '0')
local code = rules_code(r, KEYS[6], ARGV[5], customer)
local discount = rules_discount(r, amount)
local refusal = rules_refusal(r, tonumber(remaining), uses, amount, discount, now, code)
if refusal then
  return {refusal, '', '0', '0', '0', ''}
end

if r.replid ~= '' and r.replid ~= incarnation() then
  return {'SUSPECT', '', '0', '0', '0', ''}
end

local held = {customer = customer, reserved = ARGV[4],
              expires = string.format('%.0f', now + r.ttl),
              discount = discount, amount = ARGV[3], version = r.version}
redis.call('DECR', KEYS[2])
-- HINCRBY refuses "-0": a zero discount leaves the budget as it is.
if r.budget and held.discount ~= '0' then
  redis.call('HINCRBY', KEYS[1], 'budget', '-' .. held.discount)
end
redis.call('HINCRBY', KEYS[3], customer, 1)
if code then
  redis.call('HINCRBY', KEYS[6], code.name, 1)
  redis.call('HINCRBY', KEYS[6], code.name .. '|' .. customer, 1)
end
redis.call('HSET', KEYS[4], order, entry_format('A', held))
entry_moved(KEYS[4])
redis.call('ZADD', KEYS[5], ARGV[4], order)
return {'RESERVED', customer, held.reserved, held.expires, held.discount, held.version}
