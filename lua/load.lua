-- Flashgate gate: load a voucher, once. Does nothing if it is loaded already, so a slow
-- loader can never overwrite live counters. Runs after incarnation.lua: `meta` records which
-- copy of Redis' data the voucher was loaded into (field `replid`).
--
-- KEYS[1] meta  KEYS[2] remaining  KEYS[3] users  KEYS[4] lost (lost.lua: deleted, the wait is over)
-- KEYS[5] codes, a campaign's gate only (reserve.lua)
-- ARGV[1] remaining (total_limit less the uses held, read from Postgres)
-- ARGV[2] n, the number of meta arguments that follow: field, value, field, value, ... (the
--         rules, and `budget`, the money left, for a voucher with a budget)
-- ARGV[3 + n ..] customerId, active uses, customerId, active uses, ...
--         A campaign's gate: ARGV[3 + n] is u, the number of those arguments, and after them
--         the `codes` hash's: CODE, uses held, CODE|customerId, uses, ...
-- Returns 1 when it loaded, 0 when the voucher was already loaded.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local n = tonumber(ARGV[2])
local first, last = 3 + n, #ARGV
if KEYS[5] then
  first = 4 + n
  last = 3 + n + tonumber(ARGV[3 + n])
  redis.call('DEL', KEYS[5])
  for i = last + 1, #ARGV, 2 do
    redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
  end
end
redis.call('DEL', KEYS[3])
for i = first, last, 2 do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 3, 2 + n))
redis.call('HSET', KEYS[1], 'replid', incarnation())
redis.call('DEL', KEYS[4])
return 1
