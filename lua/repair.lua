-- Flashgate gate: the reconciler's repair, as a compare-and-set.
-- KEYS[1] remaining  KEYS[2] pending  KEYS[3] meta  KEYS[4] loading
-- ARGV[1] the value the reconciler read  ARGV[2] the value to set
-- ARGV[3] the voucher's version the value to set was computed at
-- Sets `remaining` only if nothing moved it since it was read (a reserve or release that ran in
-- between wins, and the next sweep looks again), no order is pending (an order reserved after
-- the reconciler counted what was in flight, not yet in Postgres, would otherwise make the gate
-- look short by one and the repair hand that use out twice), no loader or change of the limit
-- holds the gate lock, and the gate's rules are of the version the value was computed at (a
-- change of the limit in between makes it stale). Returns 1 when it set the value.
if redis.call('ZCARD', KEYS[2]) == 0 and redis.call('GET', KEYS[1]) == ARGV[1]
    and redis.call('EXISTS', KEYS[4]) == 0
    and (redis.call('HGET', KEYS[3], 'version') or '0') == ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
