-- fg_resize_slots(code, limit): a new total limit spread over a voucher's slots, under every
-- slot's lock, refused below the uses held (FG409 LIMIT_BELOW_USED).

CREATE OR REPLACE FUNCTION fg_resize_slots(p_code text, p_limit integer)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_used  BIGINT;
    v_k     INT;
    v_room  BIGINT;
BEGIN
    PERFORM 1 FROM voucher_slot s WHERE s.voucher_code = p_code ORDER BY s.slot FOR UPDATE;
    SELECT COALESCE(sum(s.used), 0), count(*) INTO v_used, v_k
      FROM voucher_slot s WHERE s.voucher_code = p_code;
    IF p_limit < v_used THEN
        RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = 'LIMIT_BELOW_USED',
              DETAIL = format('%s uses are held', v_used);
    END IF;
    v_room := p_limit - v_used;
    UPDATE voucher_slot s
       SET cap = s.used + v_room / v_k + CASE WHEN o.rank < v_room % v_k THEN 1 ELSE 0 END
      FROM (SELECT x.slot, row_number() OVER (ORDER BY x.slot) - 1 AS rank
              FROM voucher_slot x WHERE x.voucher_code = p_code) o
     WHERE s.voucher_code = p_code AND s.slot = o.slot;
    UPDATE voucher SET total_limit = p_limit WHERE code = p_code;
    RETURN v_used;
END;
$$;
