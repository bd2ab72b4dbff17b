-- fg_used(code): the uses a voucher holds, the sum of its slots.

CREATE OR REPLACE FUNCTION fg_used(p_code text)
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT COALESCE(sum(used), 0) FROM voucher_slot WHERE voucher_code = p_code;
$$;
