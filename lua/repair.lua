-- Flashgate gate: the reconciler's repair, as a compare-and-set. Runs after entry.lua.
-- KEYS[1] remaining  KEYS[2] pending  KEYS[3] meta  KEYS[4] loading  KEYS[5] orders
-- ARGV[1] the value the reconciler read  ARGV[2] the value to set
-- ARGV[3] the voucher's version the value to set was computed at
-- ARGV[4] the `orders` hash's `#moves` when the reconciler read it (entry.lua)
-- ARGV[5] meta's `budget` the reconciler read ('' none)
-- ARGV[6] the budget to set ('' none: a budget removed in Postgres goes from the gate too)
-- Sets `remaining`, and the money budget left with it, only if:
-- * nothing moved either since they were read (a reserve or release that ran in between wins,
--   and the next sweep looks again);
-- * no order is pending (an order reserved after the reconciler counted what was in flight, not
--   yet in Postgres, would otherwise make the gate look one short, and the repair would hand that
--   use out twice);
-- * no order gained or lost a use since it read them (a release whose gate step ran in between
--   gave its use back already: counted again, it would be given back twice). A counter the
--   scripts keep, not a read of the whole hash: this runs in constant time, whatever the
--   voucher's history;
-- * no loader or change of the limit holds the gate lock, and the gate's rules are of the
--   version the value was computed at (a change of the limit in between makes it stale).
-- Returns 1 when it set the value.
if redis.call('ZCARD', KEYS[2]) ~= 0 or redis.call('GET', KEYS[1]) ~= ARGV[1]
    or redis.call('EXISTS', KEYS[4]) == 1
    or (redis.call('HGET', KEYS[3], 'version') or '0') ~= ARGV[3]
    or (redis.call('HGET', KEYS[3], 'budget') or '') ~= ARGV[5] then
  return 0
end
if (redis.call('HGET', KEYS[5], ENTRY_MOVES) or '0') ~= ARGV[4] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[3], 'budget', ARGV[6])
else
  redis.call('HDEL', KEYS[3], 'budget')
end
return 1
