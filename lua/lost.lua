-- Flashgate gate: how long ago a warm-up first found a voucher gone from a gate that had held
-- it (Redis lost its data), on Redis' clock so that every process agrees.
--
-- A grant lost with the data was made before the loss, so its event was sent, or its send timed
-- out, within one send timeout of the moment the loss was first noticed: the warm-up loads
-- only after that long, and once no event is in flight. load.lua deletes the key; its TTL
-- retires it if the voucher is never loaded again (a later notice only waits longer).
--
-- KEYS[1] voucher:{CODE}:lost   string: ms when first noticed
-- ARGV[1] the key's TTL (ms)
--
-- Returns the ms since the loss was first noticed (0 the first time).
local now = clock_ms()
redis.call('SET', KEYS[1], now, 'NX', 'PX', ARGV[1])
return now - tonumber(redis.call('GET', KEYS[1]))
