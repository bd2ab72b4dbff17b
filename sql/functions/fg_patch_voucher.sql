-- fg_patch_voucher: PATCH /vouchers/{code}: the rules, limit, budget and slots changed at the
-- version the caller read (optimistic), refused below what is held, the replaced rules kept for
-- mode B's consumer (voucher_rules; docs/ARCHITECTURE.md, "Changing a voucher").

CREATE OR REPLACE FUNCTION fg_patch_voucher(
    p_code text,
    p_version bigint,
    p_discount_amount bigint,
    p_discount_percent smallint,
    p_max_discount bigint,
    p_min_order_amount bigint,
    p_total_limit integer,
    p_per_user_limit integer,
    p_starts_at timestamp with time zone,
    p_ends_at timestamp with time zone,
    p_active boolean,
    p_counter_slots smallint,
    p_budget_amount bigint
)
RETURNS TABLE(
    outcome text,
    version bigint
)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v     RECORD;
    bud   RECORD;
    held  BIGINT;
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
    SELECT b.amount, b.used INTO bud FROM voucher_budget b WHERE b.voucher_code = p_code FOR UPDATE;
    IF FOUND THEN
        IF p_budget_amount < bud.used THEN
            RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = 'BUDGET_BELOW_USED',
                  DETAIL = format('%s is held', bud.used);
        END IF;
        UPDATE voucher_budget b SET amount = p_budget_amount
         WHERE b.voucher_code = p_code AND b.amount IS DISTINCT FROM p_budget_amount;
    ELSIF p_budget_amount IS NOT NULL THEN
        PERFORM 1 FROM voucher_slot s WHERE s.voucher_code = p_code ORDER BY s.slot FOR UPDATE;
        SELECT COALESCE(sum(r.discount_amount), 0) INTO held
          FROM redemption r WHERE r.voucher_code = p_code AND r.status IN (1, 2);
        IF p_budget_amount < held THEN
            RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = 'BUDGET_BELOW_USED',
                  DETAIL = format('%s is held', held);
        END IF;
        INSERT INTO voucher_budget (voucher_code, amount, used) VALUES (p_code, p_budget_amount, held);
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
