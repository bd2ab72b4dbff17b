-- Flashgate gate: the reconciler's repair, as a compare-and-set.
-- KEYS[1] remaining   ARGV[1] the value the reconciler read   ARGV[2] the value to set
-- Sets `remaining` only if nothing moved it since it was read: a reserve or release that ran in
-- between wins, and the next sweep looks again. Returns 1 when it set the value, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
