-- Flashgate gate: a voucher's gate after Redis changed hands (lookup.lua answered 'suspect').
-- Runs after incarnation.lua.
--
-- A grant lost in a failover was made before it, so its event was sent, or its send timed out,
-- within one send timeout of the moment the suspicion was first noticed. Once that long has
-- passed and no event is in flight, every lost grant has landed, and the gate is trusted again.
--
-- KEYS[1] meta
-- ARGV[1] 'notice' or 'trust'
-- ARGV[2] the replication id lookup.lua reported with 'suspect'
--
-- notice: records when this node was first found suspect (field `suspect_since`,
--         "replid:ms" on Redis' clock, so every process agrees), and returns the ms since then;
--         -1 when the voucher is not loaded or Redis changed hands again.
-- trust:  the gate is trusted on that node (`replid` set to it); returns 1, or 0 when the
--         voucher is not loaded or Redis changed hands again.
if redis.call('EXISTS', KEYS[1]) == 0 or incarnation() ~= ARGV[2] then
  return ARGV[1] == 'notice' and -1 or 0
end
if ARGV[1] == 'trust' then
  redis.call('HSET', KEYS[1], 'replid', ARGV[2])
  redis.call('HDEL', KEYS[1], 'suspect_since')
  return 1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local since = redis.call('HGET', KEYS[1], 'suspect_since')
local node, at = string.match(since or '', '^(%w+):(%d+)$')
if node ~= ARGV[2] then
  redis.call('HSET', KEYS[1], 'suspect_since', ARGV[2] .. ':' .. now)
  return 0
end
return now - tonumber(at)
