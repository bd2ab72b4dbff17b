-- A voucher's counter slots can change after creation (`PATCH /vouchers/{code}` with
-- `counterSlots`): a voucher raised from 10 to 100,000 uses should not keep the one slot its
-- first limit chose.
--
-- fg_patch_voucher takes the slot count as one more argument (NULL: unchanged). The change runs
-- under the same locks as a limit change: the voucher's row, then every slot in slot order, so
-- no reserve takes a use while slots are added or removed, and the deferred caps-sum trigger
-- (V3) still checks at commit that the caps add up to the limit. New slots start empty and the
-- room left is spread over all slots again (fg_resize_slots). A slot is removed only if it holds
-- nothing (no use, no confirmed use, no revocation counted): its counters are the sums of the
-- rows that name it, and moving those rows would cost a pass over the voucher's history under
-- every slot's lock. Otherwise the change is refused, SLOTS_IN_USE, and nothing is written.

-- fg_change_slots: sets the voucher's slots to p_slots; the caller re-spreads the caps.
CREATE FUNCTION fg_change_slots(p_code TEXT, p_slots SMALLINT)
RETURNS void
LANGUAGE plpgsql AS $$
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

DROP FUNCTION fg_patch_voucher(TEXT, BIGINT, BIGINT, SMALLINT, BIGINT, BIGINT, INT, INT,
                               TIMESTAMPTZ, TIMESTAMPTZ, BOOLEAN);

-- fg_patch_voucher as in V10, with the slot count.
CREATE FUNCTION fg_patch_voucher(
    p_code              TEXT,
    p_version           BIGINT,
    p_discount_amount   BIGINT,
    p_discount_percent  SMALLINT,
    p_max_discount      BIGINT,
    p_min_order_amount  BIGINT,
    p_total_limit       INT,
    p_per_user_limit    INT,
    p_starts_at         TIMESTAMPTZ,
    p_ends_at           TIMESTAMPTZ,
    p_active            BOOLEAN,
    p_counter_slots     SMALLINT
) RETURNS TABLE (outcome TEXT, version BIGINT)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v  RECORD;
BEGIN
    SELECT x.version, x.total_limit, x.counter_slots INTO v
      FROM voucher x WHERE x.code = p_code FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'NOT_FOUND'::TEXT, NULL::BIGINT;
        RETURN;
    END IF;
    IF v.version <> p_version THEN
        RETURN QUERY SELECT 'STALE'::TEXT, v.version;
        RETURN;
    END IF;
    IF p_counter_slots IS NOT NULL AND p_counter_slots <> v.counter_slots THEN
        PERFORM fg_change_slots(p_code, p_counter_slots);
        PERFORM fg_resize_slots(p_code, p_total_limit);
    ELSIF p_total_limit <> v.total_limit THEN
        PERFORM fg_resize_slots(p_code, p_total_limit);
    END IF;
    INSERT INTO voucher_rules (voucher_code, version, discount_amount, discount_percent,
                               max_discount_amount, min_order_amount, starts_at, ends_at,
                               active, superseded_at)
    SELECT x.code, x.version, x.discount_amount, x.discount_percent, x.max_discount_amount,
           x.min_order_amount, x.starts_at, x.ends_at, x.active, now()
      FROM voucher x WHERE x.code = p_code;
    UPDATE voucher x
       SET discount_amount = p_discount_amount,
           discount_percent = p_discount_percent,
           max_discount_amount = p_max_discount,
           min_order_amount = p_min_order_amount,
           per_user_limit = p_per_user_limit,
           starts_at = p_starts_at,
           ends_at = p_ends_at,
           active = p_active,
           version = x.version + 1
     WHERE x.code = p_code;
    RETURN QUERY SELECT 'APPLIED'::TEXT, v.version + 1;
END;
$$;
