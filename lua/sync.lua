-- Flashgate gate: the reconciler's copy of a voucher's rules from Postgres into the gate, for a
-- change whose last step did not reach Redis.
--
-- KEYS[1] meta  KEYS[2] loading
-- ARGV[1] the voucher's version the rules were read at
-- ARGV[2..] meta field, value, ... (the version among them)
--
-- Writes only when no loader or change holds the gate lock, the voucher is loaded, the gate's
-- rules are not newer than the ones read (a change that completed after the read wins), and a
-- field differs. Returns 1 when it wrote.
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if tonumber(redis.call('HGET', KEYS[1], 'version') or '0') > tonumber(ARGV[1]) then
  return 0
end
local differs = false
for i = 2, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) ~= ARGV[i + 1] then
    differs = true
  end
end
if not differs then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return 1
