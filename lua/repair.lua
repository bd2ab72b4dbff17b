-- Flashgate gate: the reconciler's repair, as a compare-and-set. Runs after entry.lua.
-- KEYS[1] remaining  KEYS[2] pending  KEYS[3] meta  KEYS[4] loading  KEYS[5] orders
-- ARGV[1] the value the reconciler read  ARGV[2] the value to set
-- ARGV[3] the voucher's version the value to set was computed at
-- ARGV[4] how many orders held a use in the gate when the reconciler read it
-- Sets `remaining` only if:
-- * nothing moved it since it was read (a reserve or release that ran in between wins, and the
--   next sweep looks again);
-- * no order is pending (an order reserved after the reconciler counted what was in flight, not
--   yet in Postgres, would otherwise make the gate look one short, and the repair would hand that
--   use out twice);
-- * the orders holding a use are as many as when it read them (a release whose gate step ran
--   in between gave its use back already: counted again, it would be given back twice);
-- * no loader or change of the limit holds the gate lock, and the gate's rules are of the
--   version the value was computed at (a change of the limit in between makes it stale).
-- Returns 1 when it set the value.
if redis.call('ZCARD', KEYS[2]) ~= 0 or redis.call('GET', KEYS[1]) ~= ARGV[1]
    or redis.call('EXISTS', KEYS[4]) == 1
    or (redis.call('HGET', KEYS[3], 'version') or '0') ~= ARGV[3] then
  return 0
end
local active = 0
for _, raw in ipairs(redis.call('HVALS', KEYS[5])) do
  if entry_parse(raw).state == 'A' then
    active = active + 1
  end
end
if active ~= tonumber(ARGV[4]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
