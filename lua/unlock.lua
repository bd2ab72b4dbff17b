-- Flashgate gate: release the loading lock, only if this caller still holds it
-- (compare-and-delete). A loader that outlived the lock's TTL must not delete the lock another
-- caller has taken since.
-- KEYS[1] loading   ARGV[1] the token this caller set
-- Returns 1 when it deleted the lock, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
