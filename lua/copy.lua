-- Flashgate gate: one bounded step of a sold-out voucher's copy into a process, which then
-- answers its losers, and its winners' retries, from memory (shared/src/reservations/sold_out.rs).
-- Writes nothing. Runs after entry.lua, so Rust reads the entries parsed, as lookup.lua gives them.
--
-- KEYS[1] orders  KEYS[2] users  KEYS[3] remaining  KEYS[4] meta   (see reserve.lua)
-- ARGV[1] what to read: 'orders', 'users', or '' for the header alone
-- ARGV[2] the cursor (0 to start)  ARGV[3] how many fields to read (HSCAN's COUNT)
-- Returns {remaining, moves, size, perUser, cursor, ...}: remaining '' when the voucher is not
-- loaded; moves the `#moves` counter (entry.lua); size the orders hash's field count; perUser ''
-- without a per-user limit; cursor '0' once the whole hash has been seen ('' with the header
-- alone); then the step's fields:
--   orders: orderId, state, customer, reservedMs, expiresMs, discount, orderAmount, version
--           (as lookup.lua parses them);
--   users:  customerId, activeUses.
-- The caller reads the header again after the last step: the copy holds exactly what the gate
-- holds only if no order moved (moves) and none was added (size) in between, and every change
-- to `users` moves an order or reloads the voucher (which changes `remaining`).
local out = {redis.call('GET', KEYS[3]) or '', redis.call('HGET', KEYS[1], ENTRY_MOVES) or '0',
             tostring(redis.call('HLEN', KEYS[1])), redis.call('HGET', KEYS[4], 'per_user') or '',
             ''}
if ARGV[1] == '' then
  return out
end
local hash = KEYS[1]
if ARGV[1] == 'users' then
  hash = KEYS[2]
end
local step = redis.call('HSCAN', hash, ARGV[2], 'COUNT', ARGV[3])
out[5] = step[1]
local fields = step[2]
for i = 1, #fields, 2 do
  if ARGV[1] == 'users' then
    out[#out + 1] = fields[i]
    out[#out + 1] = fields[i + 1]
  elseif string.sub(fields[i], 1, 1) ~= '#' then
    local e = entry_parse(fields[i + 1])
    local n = #out
    out[n + 1] = fields[i]
    out[n + 2] = e.state
    out[n + 3] = e.customer
    out[n + 4] = e.reserved
    out[n + 5] = e.expires
    out[n + 6] = e.discount
    out[n + 7] = e.amount
    out[n + 8] = e.version
  end
end
return out
