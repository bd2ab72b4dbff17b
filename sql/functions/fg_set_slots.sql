-- fg_set_slots(code, limit, slots): a voucher's counter slots written with caps that sum to
-- `limit` (at creation).

CREATE OR REPLACE FUNCTION fg_set_slots(
    p_code text,
    p_limit integer,
    p_slots smallint
)
RETURNS void
LANGUAGE sql
AS $$
    INSERT INTO voucher_slot (voucher_code, slot, cap)
    SELECT p_code, s, p_limit / p_slots + CASE WHEN s < p_limit % p_slots THEN 1 ELSE 0 END
      FROM generate_series(0, p_slots - 1) AS s
    ON CONFLICT (voucher_code, slot) DO UPDATE SET cap = EXCLUDED.cap;
$$;
