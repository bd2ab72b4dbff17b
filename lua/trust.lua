-- Flashgate gate: a voucher's gate after Redis changed hands (lookup.lua answered 'suspect',
-- or reserve.lua SUSPECT). Runs after incarnation.lua.
--
-- A grant lost in a failover was made before it, so its event was sent, or its send timed out,
-- within one send timeout of the moment the suspicion was first noticed. Once that long has
-- passed and no event is in flight, every lost grant has landed, and the gate can be repaired
-- from Postgres (load.lua, which also trusts it again).
--
-- KEYS[1] meta
--
-- Records when the node this runs on was first found suspect (field `suspect_since`,
-- "replid:ms" on Redis' clock, so every process agrees), and returns the ms since then; -1 when
-- the voucher is not loaded.
local node = incarnation()
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local now = clock_ms()
local since = redis.call('HGET', KEYS[1], 'suspect_since')
local seen, at = string.match(since or '', '^(%w+):(%d+)$')
if seen ~= node then
  redis.call('HSET', KEYS[1], 'suspect_since', node .. ':' .. now)
  return 0
end
return now - tonumber(at)
