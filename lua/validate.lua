-- Flashgate gate: would a reserve be granted now? Writes nothing. Runs after rules.lua.
--
-- KEYS[1] meta  KEYS[2] remaining  KEYS[3] users  KEYS[4] codes, a campaign's code only
-- (see reserve.lua)
-- ARGV[1] customerId  ARGV[2] orderAmount  ARGV[3] now (ms)  ARGV[4] the campaign's code
--
-- Returns {outcome, discount}: ELIGIBLE with the discount a reserve would be given, NOT_LOADED,
-- or rules.lua's refusal.
local r = rules_read(KEYS[1])
local remaining = redis.call('GET', KEYS[2])
if not r or not remaining then
  return {'NOT_LOADED', '0'}
end
local amount = tonumber(ARGV[2])
local uses = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
local code = rules_code(r, KEYS[4], ARGV[4], ARGV[1])
local discount = rules_discount(r, amount)
local refusal = rules_refusal(r, tonumber(remaining), uses, amount, discount, tonumber(ARGV[3]),
                              code)
if refusal then
  return {refusal, '0'}
end
return {'ELIGIBLE', discount}
