-- Flashgate gate: what the reconciler compares on every sweep, read in one step, in constant
-- time: `remaining` and the `orders` hash's `#moves` (entry.lua). Writes nothing. Runs after
-- entry.lua.
--
-- KEYS[1] remaining  KEYS[2] orders
-- Returns {remaining, moves} ('' for remaining when the voucher is not loaded).
return {redis.call('GET', KEYS[1]) or '', redis.call('HGET', KEYS[2], ENTRY_MOVES) or '0'}
