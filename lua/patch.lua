-- Flashgate gate: apply a change of a voucher's rules and limit (PATCH), atomically with every
-- reserve. Runs only while the caller holds the voucher's gate lock (the `loading` key), which
-- keeps loaders and the reconciler off the voucher until the change is in Postgres too.
--
-- KEYS[1] meta  KEYS[2] remaining  KEYS[3] loading
-- ARGV[1] the caller's lock token
-- ARGV[2] delta: added to `remaining`; refused when it would go below zero (the uses granted,
--         in flight ones included, exceed the new limit)
-- ARGV[3] the money budget's step: '' leaves it; 'DEL' removes it; a number is added to meta's
--         `budget` (the money left), refused when it would go below zero (the discounts
--         granted, in flight ones included, exceed the new budget)
-- ARGV[4..] meta field, value, field, value, ... to set (none: leave the rules as they are)
--
-- Returns APPLIED, NOT_LOADED (nothing to change: the next load reads Postgres), LOCK_LOST (the
-- lock expired or another caller holds it: nothing changed), LIMIT_BELOW_USED or
-- BUDGET_BELOW_USED (nothing changed).
if redis.call('GET', KEYS[3]) ~= ARGV[1] then
  return 'LOCK_LOST'
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 'NOT_LOADED'
end
local delta = tonumber(ARGV[2])
if delta ~= 0 and tonumber(redis.call('GET', KEYS[2]) or '0') + delta < 0 then
  return 'LIMIT_BELOW_USED'
end
local money = tonumber(ARGV[3])
local left = redis.call('HGET', KEYS[1], 'budget')
if money and left and tonumber(left) + money < 0 then
  return 'BUDGET_BELOW_USED'
end
-- Every check passed: now the writes.
if delta ~= 0 then
  redis.call('INCRBY', KEYS[2], delta)
end
if ARGV[3] == 'DEL' then
  redis.call('HDEL', KEYS[1], 'budget')
elseif money and money ~= 0 and left then
  redis.call('HINCRBY', KEYS[1], 'budget', ARGV[3])
end
if #ARGV > 3 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 4))
end
return 'APPLIED'
