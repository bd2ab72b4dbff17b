-- Flashgate gate: load a voucher, once. Does nothing if it is loaded already, so a slow
-- loader can never overwrite live counters.
--
-- KEYS[1] meta  KEYS[2] remaining  KEYS[3] users
-- ARGV[1] remaining (total_limit - used_count, read from Postgres)
-- ARGV[2..7] discount, min_order, starts_ms, ends_ms, per_user, ttl_ms
-- ARGV[8..] customerId, active uses, customerId, active uses, ...
-- Returns 1 when it loaded, 0 when the voucher was already loaded.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('DEL', KEYS[3])
for i = 8, #ARGV, 2 do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1],
  'discount', ARGV[2], 'min_order', ARGV[3], 'starts_ms', ARGV[4],
  'ends_ms', ARGV[5], 'per_user', ARGV[6], 'ttl_ms', ARGV[7])
return 1
