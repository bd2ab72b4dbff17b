-- Flashgate gate: the order entry. The one place its format is written and read: this prelude is
-- put in front of every script that touches the `orders` hash (shared/src/gate/mod.rs), and Rust
-- reads entries only through lookup.lua's parsed reply.
--
-- An `orders` value is
--   "A|customer|reservedMs|expiresMs|discount|orderAmount|version"  the order holds a use
--   "R|customer|reservedMs|expiresMs|discount|orderAmount|version"  released: a tombstone, so
--                                                                   the orderId cannot reserve
--                                                                   again (kept for a retention:
--                                                                   release.lua, prune.lua)
-- `version` is the voucher's version whose rules granted the use (meta's `version`): a retry's
-- event carries it again, and the consumer checks the event against those rules. Entries written
-- before the gate kept the amount end at discount (amount reads as 0), those written before it
-- kept the version end at the amount (version reads as ''). A tombstone of an order the gate
-- never held has an empty customer and zeros.
--
-- One more field, `#moves` (no orderId starts with '#'), counts every time an order gained or
-- lost a use. The reconciler compares it instead of reading the whole hash, whose size is the
-- voucher's history: equal counts mean no order moved in between (repair.lua). Only a change
-- is meant, never an absolute figure (a gate loaded before the field existed starts at 0).
local ENTRY_MOVES = '#moves'

-- Parses an entry into a table {state = 'A'|'R', customer, reserved, expires, discount, amount,
-- version} (all strings; customer and version may be ''), or nil when there is none.
local function entry_parse(raw)
  if not raw then
    return nil
  end
  local state, customer, reserved, expires, discount, amount, version =
    string.match(raw, '^([AR])|(%d*)|(%d+)|(%d+)|(%d+)|?(%d*)|?(%d*)$')
  if not state then
    error('bad order entry ' .. raw)
  end
  if amount == '' then
    amount = '0'
  end
  return {state = state, customer = customer, reserved = reserved, expires = expires,
          discount = discount, amount = amount, version = version}
end

-- The text of an entry in `state` ('A' or 'R') with the fields of table `e` (`version` may be
-- nil or '': not known).
local function entry_format(state, e)
  local text = state .. '|' .. e.customer .. '|' .. e.reserved .. '|' .. e.expires .. '|' ..
    e.discount .. '|' .. e.amount
  if e.version and e.version ~= '' then
    text = text .. '|' .. e.version
  end
  return text
end

-- Records in the `orders` hash `key` that an order gained or lost a use.
local function entry_moved(key)
  redis.call('HINCRBY', key, ENTRY_MOVES, 1)
end
