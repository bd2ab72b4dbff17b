-- Flashgate gate: a voucher's rules, as its `meta` hash holds them (the fields are named in one
-- place, GateMeta::fields in shared/src/gate/meta.rs), and its money budget left (`budget`,
-- absent without one: a counter that load.lua sets and reserve.lua and release.lua move, not a
-- rule). This prelude is put in front of reserve.lua and validate.lua, so that a reserve and a
-- validation decide alike, in the order fg_validate decides in Postgres.
--
-- A flash-sale campaign's gate is one `meta` for all its codes: the campaign's rules, its
-- per-user limit over every code (`per_user`), its money left (`budget`), and `per_code`, each
-- code's own limit. Its `codes` hash holds what each code has taken (rules_code).

-- The rules, or nil when the voucher is not loaded. A gate loaded before a field existed reads
-- as its default (active, fixed discount).
local function rules_read(meta_key)
  local v = redis.call('HMGET', meta_key, 'discount', 'percent', 'max_discount', 'min_order',
    'starts_ms', 'ends_ms', 'per_user', 'ttl_ms', 'active', 'version', 'budget', 'per_code',
    'replid')
  if not v[5] then
    return nil
  end
  return {discount = v[1] or '0', percent = v[2] or '', max_discount = v[3] or '',
          min_order = tonumber(v[4]), starts = tonumber(v[5]), ends = tonumber(v[6]),
          per_user = tonumber(v[7]), ttl = tonumber(v[8]), active = v[9] ~= '0',
          version = v[10] or '', budget = tonumber(v[11]), per_code = tonumber(v[12]),
          replid = v[13] or ''}
end

-- A campaign's code: the uses it holds and those of `customer` on it, from the campaign's
-- `codes` hash (field CODE, and CODE|customerId; absent is 0). nil for a voucher's own gate.
local function rules_code(r, codes_key, code, customer)
  if not codes_key then
    return nil
  end
  local v = redis.call('HMGET', codes_key, code, code .. '|' .. customer)
  return {name = code, uses = tonumber(v[1] or '0'), customer = tonumber(v[2] or '0'),
          limit = r.per_code or 1}
end

-- The discount of an order of `amount`, as a decimal string: fg_discount's rule (a fixed amount
-- never more than the order). Lua numbers are doubles, exact only up to 2^53, and amount * percent
-- can reach 10^17; so the amount is split into hundreds and the rest, each product staying exact.
local function rules_discount(r, amount)
  if r.percent == '' then
    if tonumber(r.discount) > amount then
      return string.format('%.0f', amount)
    end
    return r.discount
  end
  local percent = tonumber(r.percent)
  local rest = math.fmod(amount, 100)
  local d = ((amount - rest) / 100) * percent + math.floor(rest * percent / 100)
  if r.max_discount ~= '' and d > tonumber(r.max_discount) then
    d = tonumber(r.max_discount)
  end
  return string.format('%.0f', d)
end

-- Why a reserve of `amount` (its discount `discount`, from rules_discount) by a customer holding
-- `uses` would be refused at `now` (ms), or nil. `code` (rules_code) for a campaign's code: its
-- own limit holds with the campaign's, per user and in all, as fg_validate decides it (a code's
-- per-user limit is its limit).
local function rules_refusal(r, remaining, uses, amount, discount, now, code)
  if not r.active then return 'INACTIVE' end
  if now < r.starts then return 'NOT_STARTED' end
  if now >= r.ends then return 'EXPIRED' end
  if amount < r.min_order then return 'MIN_ORDER_AMOUNT' end
  -- Per-user before stock, as Postgres decides.
  if uses >= r.per_user or (code and code.customer >= code.limit) then return 'ALREADY_USED' end
  if remaining <= 0 or (code and code.uses >= code.limit) then return 'OUT_OF_STOCK' end
  -- Money after stock, as Postgres decides: the budget left must cover this discount.
  if r.budget and tonumber(discount) > r.budget then return 'BUDGET_EXHAUSTED' end
  return nil
end
