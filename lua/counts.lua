-- Flashgate gate: what the reconciler compares on every sweep, read in one step, in constant
-- time: `remaining`, the `orders` hash's `#moves` (entry.lua) and the money budget left (meta's
-- `budget`). Writes nothing. Runs after entry.lua.
--
-- KEYS[1] remaining  KEYS[2] orders  KEYS[3] meta
-- Returns {remaining, moves, budget} ('' for remaining when the voucher is not loaded, '' for
-- budget when it has none).
return {redis.call('GET', KEYS[1]) or '', redis.call('HGET', KEYS[2], ENTRY_MOVES) or '0',
        redis.call('HGET', KEYS[3], 'budget') or ''}
