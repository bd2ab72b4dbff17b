-- Flashgate gate: take an order out of the gate. Safe to call any number of times. Runs after
-- entry.lua.
--
-- KEYS[1] remaining  KEYS[2] users  KEYS[3] orders  KEYS[4] pending  KEYS[5] meta
-- KEYS[6] released (tombstones by the time they were written, so that prune.lua retires them)
-- KEYS[7] codes, a campaign's code only (see reserve.lua)
-- ARGV[1] orderId (CODE|orderId in a campaign's gate)
-- ARGV[2] give_back  '1': an active order's use returns to `remaining`, and its discount to
--                    meta's `budget` when the voucher has one; '0': they do not (REVOKED:
--                    Postgres refused the use, so the gate had one too many)
-- ARGV[3] tombstone  '1': leave a tombstone so the orderId can never reserve again (release);
--                    '0': forget the order entirely (undo of a reserve Postgres did not take,
--                    so that the client's retry with the same orderId starts afresh);
--                    'keep': leave the order active (the gate counted an order twice, after it
--                    lost data: one use and one customer use come back, the order stays)
-- ARGV[4] customerId for a tombstone of an order the gate never saw ('' if unknown)
-- ARGV[5] the campaign's code (with KEYS[7] only): its use comes back with the campaign's, and
--         its customer's use of the code with the customer's
--
-- Returns RELEASED (was active), ALREADY (was a tombstone), UNKNOWN (no entry) or NOT_LOADED (the
-- voucher is not in the gate: nothing is written, so a retired voucher leaves no key behind, and
-- a gate that lost its data is loaded again from Postgres, which has the release).
local order, give_back, tombstone = ARGV[1], ARGV[2] == '1', ARGV[3] == '1'
local keep = ARGV[3] == 'keep'
if redis.call('EXISTS', KEYS[5]) == 0 then
  return 'NOT_LOADED'
end
-- A tombstone is kept for a retention (prune.lua), not for the sale's life: each one written is
-- recorded with the Redis clock's time.
local function bury(e)
  redis.call('HSET', KEYS[3], order, entry_format('R', e))
  redis.call('ZADD', KEYS[6], clock_ms(), order)
end
local e = entry_parse(redis.call('HGET', KEYS[3], order))
redis.call('ZREM', KEYS[4], order)
if not e then
  if tombstone then
    bury({customer = ARGV[4], reserved = '0', expires = '0', discount = '0', amount = '0'})
  end
  return 'UNKNOWN'
end
if e.state == 'R' then
  return 'ALREADY'
end
-- A count at zero is deleted: these hashes hold the uses held, not the history.
local function down(key, field)
  if redis.call('HINCRBY', key, field, -1) <= 0 then
    redis.call('HDEL', key, field)
  end
end
if give_back then
  redis.call('INCR', KEYS[1])
  if e.discount ~= '0' and redis.call('HEXISTS', KEYS[5], 'budget') == 1 then
    redis.call('HINCRBY', KEYS[5], 'budget', e.discount)
  end
  if KEYS[7] then
    down(KEYS[7], ARGV[5])
  end
end
down(KEYS[2], e.customer)
if KEYS[7] then
  down(KEYS[7], ARGV[5] .. '|' .. e.customer)
end
if tombstone then
  bury(e)
elseif not keep then
  redis.call('HDEL', KEYS[3], order)
end
entry_moved(KEYS[3])
return 'RELEASED'
