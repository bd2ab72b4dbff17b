-- fg_slot_room(code, wanted, first_order, slots): room for `wanted` new uses of a voucher, its
-- slots locked one at a time from a start the batch's first order chooses (so that batches
-- spread over the slots), skipping those other transactions hold (SKIP LOCKED), until their
-- room covers `wanted`. When it does not, every slot with room is locked in order (waiting as
-- needed), and the room they hold is all there is. Rows in the order their room is taken: the
-- batch's new uses, in arrival order, fill them in turn (fg_merge_strict, fg_merge_winners).

CREATE OR REPLACE FUNCTION fg_slot_room(
    p_code text,
    p_wanted bigint,
    p_first_order text,
    p_slots integer
)
RETURNS TABLE(slot smallint, room bigint)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    free  RECORD;
    got   BIGINT := 0;
    taken SMALLINT[] := '{}';
    rooms BIGINT[] := '{}';
BEGIN
    LOOP
        SELECT x.slot, x.cap - x.used AS room INTO free
          FROM voucher_slot x
         WHERE x.voucher_code = p_code AND x.used < x.cap AND x.slot <> ALL (taken)
         ORDER BY (x.slot - abs(hashtext(p_first_order) % p_slots) + p_slots) % p_slots
         LIMIT 1
           FOR UPDATE SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        taken := taken || free.slot;
        rooms := rooms || free.room;
        got := got + free.room;
        EXIT WHEN got >= p_wanted;
    END LOOP;
    IF got < p_wanted THEN
        SELECT COALESCE(array_agg(l.slot ORDER BY l.slot), '{}'),
               COALESCE(array_agg(l.cap - l.used ORDER BY l.slot), '{}')
          INTO taken, rooms
          FROM (SELECT x.slot, x.cap, x.used FROM voucher_slot x
                 WHERE x.voucher_code = p_code
                 ORDER BY x.slot
                   FOR UPDATE) l
         WHERE l.used < l.cap;
    END IF;
    RETURN QUERY SELECT t.slot, t.room FROM unnest(taken, rooms) WITH ORDINALITY t(slot, room, ord)
                  ORDER BY t.ord;
END;
$$;
