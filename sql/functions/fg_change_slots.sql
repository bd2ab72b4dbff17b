-- fg_change_slots(code, slots): a voucher's number of counter slots changed (PATCH
-- counterSlots), refused (FG409 SLOTS_IN_USE) while a slot that goes away holds a use; the caps
-- are spread again over the new slots (docs/ARCHITECTURE.md, "Counter slots").

CREATE OR REPLACE FUNCTION fg_change_slots(p_code text, p_slots smallint)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_k   SMALLINT;
    held  RECORD;
BEGIN
    PERFORM 1 FROM voucher_slot s WHERE s.voucher_code = p_code ORDER BY s.slot FOR UPDATE;
    SELECT s.slot, s.used, s.revoked INTO held
      FROM voucher_slot s
     WHERE s.voucher_code = p_code AND s.slot >= p_slots
       AND (s.used > 0 OR s.confirmed > 0 OR s.revoked > 0)
     ORDER BY s.slot
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = 'SLOTS_IN_USE',
              DETAIL = format('slot %s still holds %s uses', held.slot, held.used);
    END IF;
    SELECT x.counter_slots INTO v_k FROM voucher x WHERE x.code = p_code;
    DELETE FROM voucher_slot s WHERE s.voucher_code = p_code AND s.slot >= p_slots;
    INSERT INTO voucher_slot (voucher_code, slot, cap)
    SELECT p_code, s, 0 FROM generate_series(v_k, p_slots - 1) AS s;
    UPDATE voucher x SET counter_slots = p_slots WHERE x.code = p_code;
END;
$$;
