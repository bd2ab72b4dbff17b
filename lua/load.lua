-- Flashgate gate: load a voucher, once, by the loader that holds the gate lock; or repair a
-- gate that is no longer the copy of Redis' data it was loaded into (a failover).
--
-- A load does nothing if the voucher is loaded already, so a slow loader can never overwrite
-- live counters, and refuses when the lock no longer holds the loader's token: a loader that
-- stalled past the lock's TTL read Postgres before a change (PATCH) that took the lock since and
-- found nothing to change in the gate; its snapshot is stale and must not be written.
--
-- A repair (ARGV[2] set) overwrites the counts of a loaded gate whose `replid` is not the node's
-- (reserve.lua answered SUSPECT): the caller read them from Postgres plus the grants still
-- pending in this gate, after the grants the failover lost had landed. It keeps the orders and
-- the pending set, and writes only while no order gained or lost a use since the caller read
-- the orders' `#moves` (a release in between would be counted twice), under the lock.
--
-- Runs after incarnation.lua and entry.lua: `meta` records which copy of Redis' data the voucher
-- was loaded into (field `replid`).
--
-- KEYS[1] meta  KEYS[2] remaining  KEYS[3] users  KEYS[4] lost (lost.lua: deleted, the wait is over)
-- KEYS[5] loading, the gate lock (warmup.rs, patch.rs)  KEYS[6] orders (entry.lua)
-- KEYS[7] codes, a campaign's gate only (reserve.lua)
-- ARGV[1] the caller's lock token
-- ARGV[2] '' to load; to repair, the orders' `#moves` read before Postgres was
-- ARGV[3] remaining (total_limit less the uses held)
-- ARGV[4] n, the number of meta arguments that follow: field, value, field, value, ... (the
--         rules, and `budget`, the money left, for a voucher with a budget)
-- ARGV[5 + n ..] customerId, active uses, customerId, active uses, ...
--         A campaign's gate: ARGV[5 + n] is u, the number of those arguments, and after them
--         the `codes` hash's: CODE, uses held, CODE|customerId, uses, ...
-- Returns 1 when it wrote; 0 when there was nothing to do (a load: loaded already; a repair:
-- trusted again already, or not loaded); -1 when the lock is not the caller's; -2 (a repair)
-- when an order moved since `#moves` was read. Nothing is written unless it returns 1.
local repair = ARGV[2] ~= ''
if redis.call('EXISTS', KEYS[1]) == 1 then
  if not repair or redis.call('HGET', KEYS[1], 'replid') == incarnation() then
    return 0
  end
elseif repair then
  return 0
end
if redis.call('GET', KEYS[5]) ~= ARGV[1] then
  return -1
end
if repair and (redis.call('HGET', KEYS[6], ENTRY_MOVES) or '0') ~= ARGV[2] then
  return -2
end
local n = tonumber(ARGV[4])
local first, last = 5 + n, #ARGV
if KEYS[7] then
  first = 6 + n
  last = 5 + n + tonumber(ARGV[5 + n])
  redis.call('DEL', KEYS[7])
  for i = last + 1, #ARGV, 2 do
    redis.call('HSET', KEYS[7], ARGV[i], ARGV[i + 1])
  end
end
redis.call('DEL', KEYS[3])
for i = first, last, 2 do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 5, 4 + n))
redis.call('HSET', KEYS[1], 'replid', incarnation())
redis.call('DEL', KEYS[4])
return 1
