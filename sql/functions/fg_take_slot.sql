-- fg_take_slot(code, start, slots): one use taken from the first slot with room from `start`
-- on, skipping slots other transactions hold (SKIP LOCKED); NULL when none has room.

CREATE OR REPLACE FUNCTION fg_take_slot(
    p_code text,
    p_start integer,
    p_slots integer
)
RETURNS smallint
LANGUAGE plpgsql
AS $$
DECLARE
    taken SMALLINT;
BEGIN
    UPDATE voucher_slot AS vs SET used = vs.used + 1
     WHERE (vs.voucher_code, vs.slot) = (
            SELECT x.voucher_code, x.slot FROM voucher_slot x
             WHERE x.voucher_code = p_code AND x.used < x.cap
             ORDER BY (x.slot - p_start + p_slots) % p_slots
             LIMIT 1
               FOR UPDATE SKIP LOCKED)
    RETURNING vs.slot INTO taken;
    IF FOUND THEN
        RETURN taken;
    END IF;
    SELECT l.slot INTO taken
      FROM (SELECT x.slot, x.used, x.cap FROM voucher_slot x
             WHERE x.voucher_code = p_code
             ORDER BY x.slot
               FOR UPDATE) l
     WHERE l.used < l.cap
     ORDER BY (l.slot - p_start + p_slots) % p_slots
     LIMIT 1;
    IF taken IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE voucher_slot AS vs SET used = vs.used + 1
     WHERE vs.voucher_code = p_code AND vs.slot = taken;
    RETURN taken;
END;
$$;
