-- Flashgate gate: apply a change of a voucher's rules and limit (PATCH), atomically with every
-- reserve. Runs only while the caller holds the voucher's gate lock (the `loading` key), which
-- keeps loaders and the reconciler off the voucher until the change is in Postgres too.
--
-- KEYS[1] meta  KEYS[2] remaining  KEYS[3] loading
-- ARGV[1] the caller's lock token
-- ARGV[2] delta: added to `remaining`; refused when it would go below zero (the uses granted,
--         in flight ones included, exceed the new limit)
-- ARGV[3..] meta field, value, field, value, ... to set (none: leave the rules as they are)
--
-- Returns APPLIED, NOT_LOADED (nothing to change: the next load reads Postgres), LOCK_LOST (the
-- lock expired or another caller holds it: nothing changed) or LIMIT_BELOW_USED (nothing
-- changed).
if redis.call('GET', KEYS[3]) ~= ARGV[1] then
  return 'LOCK_LOST'
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 'NOT_LOADED'
end
local delta = tonumber(ARGV[2])
if delta ~= 0 then
  if tonumber(redis.call('GET', KEYS[2]) or '0') + delta < 0 then
    return 'LIMIT_BELOW_USED'
  end
  redis.call('INCRBY', KEYS[2], delta)
end
if #ARGV > 2 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 3))
end
return 'APPLIED'
