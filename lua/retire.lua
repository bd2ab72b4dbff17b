-- Flashgate gate: retire a voucher whose sale is over: every key of it goes, tombstones
-- included. Afterwards Postgres answers for it (replays, confirm, release, reads), and a change
-- that reopens the window loads it again through warm-up.
--
-- KEYS[1] meta  KEYS[2] remaining  KEYS[3] users  KEYS[4] orders  KEYS[5] pending
-- KEYS[6] loading  KEYS[7] lost   (see reserve.lua and shared/src/gate/keys.rs)
-- KEYS[8] released  KEYS[9] codes, a campaign's gate only
-- ARGV[1] now (ms)  ARGV[2] the retirement delay after the sale's end (ms)
--
-- Returns RETIRED (also when the voucher's meta is gone already: what is left goes), LIVE (the
-- gate's own rules, which a change updates under the gate lock, say the sale ended less than the
-- delay ago), PENDING (an order the gate granted is not in Postgres yet) or LOCKED (a loader or
-- a change is at work).
if redis.call('EXISTS', KEYS[6]) == 1 then
  return 'LOCKED'
end
if redis.call('ZCARD', KEYS[5]) > 0 then
  return 'PENDING'
end
local ends = redis.call('HGET', KEYS[1], 'ends_ms')
if ends and tonumber(ends) + tonumber(ARGV[2]) > tonumber(ARGV[1]) then
  return 'LIVE'
end
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[7], KEYS[8])
if KEYS[9] then
  redis.call('UNLINK', KEYS[9])
end
return 'RETIRED'
