-- A fixed discount never exceeds the order it is taken off: 100,000 off an order of 500 gives
-- 500. (A percentage of at most 100 never did.) lua/rules.lua computes the same for the gate.
-- Reservations already granted keep the discount stored on them: a retry answers as the first
-- answer did.
CREATE OR REPLACE FUNCTION fg_discount(p_amount BIGINT, p_fixed BIGINT, p_percent SMALLINT, p_cap BIGINT)
RETURNS BIGINT
LANGUAGE sql IMMUTABLE AS $$
    -- LEAST ignores a NULL cap.
    SELECT CASE WHEN p_percent IS NULL THEN LEAST(p_fixed, p_amount)
                ELSE LEAST(p_amount * p_percent / 100, p_cap) END;
$$;
