-- Flashgate gate: retire the tombstones written more than a retention ago, a bounded batch a
-- call. A tombstone answers a retry of a released order (RESERVATION_RELEASED) without Postgres;
-- past the retention Postgres' row answers it instead (mode A), so the gate need not keep
-- every released order of a sale that may last years (docs/ARCHITECTURE.md, "The gate's keys and scripts").
--
-- KEYS[1] orders  KEYS[2] released  (see release.lua and shared/src/gate/keys.rs)
-- ARGV[1] retention (ms)  ARGV[2] most tombstones to look at
--
-- Returns {pruned, more}: tombstones deleted, and 1 if older ones are left for another call.
-- An order whose entry is active again (reloaded after a loss) only leaves `released`.
local now = clock_ms()
local limit = tonumber(ARGV[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[1]),
                       'LIMIT', 0, limit)
local pruned = 0
for _, order in ipairs(due) do
  local e = entry_parse(redis.call('HGET', KEYS[1], order))
  if e and e.state == 'R' then
    redis.call('HDEL', KEYS[1], order)
    pruned = pruned + 1
  end
  redis.call('ZREM', KEYS[2], order)
end
-- No use moved: `#moves` stays (a copy of the gate notices the hash's field count instead).
return {pruned, #due == limit and 1 or 0}
