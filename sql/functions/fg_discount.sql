-- fg_discount(amount, fixed, percent, cap): the discount of an order of `amount`: the fixed
-- discount, or the percentage rounded down and capped, never above the order (the gate's
-- lua/rules.lua computes the same, exactly).

CREATE OR REPLACE FUNCTION fg_discount(
    p_amount bigint,
    p_fixed bigint,
    p_percent smallint,
    p_cap bigint
)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    -- LEAST ignores a NULL cap.
    SELECT CASE WHEN p_percent IS NULL THEN LEAST(p_fixed, p_amount)
                ELSE LEAST(p_amount * p_percent / 100, p_cap) END;
$$;
