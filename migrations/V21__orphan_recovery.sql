-- fg_recover_orphan: the sweeper's tombstone for an orphan (a gate reservation past its TTL
-- with no row in Postgres; docs/ARCHITECTURE.md, "The sweeper").
--
-- The sweeper looks up which pending orders Postgres has, then writes a tombstone for each
-- one it did not find: two steps. A confirm (allowed from the gate's entry after expiresAt, in
-- mode B) may write a CONFIRMED row in between; an unconditional merge of RELEASED would then
-- turn a paid order's use into EXPIRED and sell it again, since RELEASED is above CONFIRMED in
-- the lattice. So the tombstone is written only where no row exists or the row is still
-- RESERVED, decided under the row's lock (or by claiming the missing key), as fg_expire decides.
-- Anything else (CONFIRMED, RELEASED) is left as it is and answered UNCHANGED with the row:
-- the caller then keeps the gate's use held.
CREATE FUNCTION fg_recover_orphan(p_code TEXT, p_order TEXT, p_customer BIGINT,
                                  p_order_amount BIGINT, p_discount BIGINT,
                                  p_reserved_at TIMESTAMPTZ, p_expires_at TIMESTAMPTZ,
                                  p_now TIMESTAMPTZ)
RETURNS TABLE (outcome TEXT, customer_id BIGINT, status SMALLINT, discount_amount BIGINT,
               expires_at TIMESTAMPTZ)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    r     redemption%ROWTYPE;
    v_ttl INT;
BEGIN
    SELECT v.reservation_ttl_seconds INTO v_ttl FROM voucher v WHERE v.code = p_code;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fg_recover_orphan: unknown voucher %', p_code USING ERRCODE = 'FG404';
    END IF;
    IF p_expires_at > p_reserved_at + make_interval(secs => v_ttl) THEN
        RAISE EXCEPTION 'expiresAt is more than the voucher''s reservation TTL (% s) after reservedAt', v_ttl
              USING ERRCODE = 'check_violation';
    END IF;
    LOOP
        SELECT * INTO r FROM redemption
         WHERE redemption.voucher_code = p_code AND redemption.order_id = p_order
           FOR UPDATE;
        IF FOUND THEN
            IF r.status <> 1 THEN
                -- A confirm (or a release) got there first: it wins.
                RETURN QUERY SELECT 'UNCHANGED'::TEXT, r.customer_id, r.status,
                                    r.discount_amount, r.expires_at;
                RETURN;
            END IF;
            -- RESERVED, and locked by this transaction until it commits: no confirm can come in
            -- between, and fg_merge's RESERVED -> RELEASED gives the use back.
            RETURN QUERY SELECT * FROM fg_merge(p_code, p_order, p_customer, 3::SMALLINT,
                                                p_order_amount, p_discount, p_reserved_at,
                                                p_expires_at, 'EXPIRED', p_now, false);
            RETURN;
        END IF;
        -- No row: the tombstone claims the key. A writer that claims it first (a confirm, the
        -- late event) makes this insert do nothing, and the loop reads its row under its lock.
        INSERT INTO redemption AS x (voucher_code, order_id, customer_id, status, order_amount,
                                     discount_amount, reserved_at, expires_at, released_at,
                                     release_reason)
        VALUES (p_code, p_order, p_customer, 3, p_order_amount, p_discount, p_reserved_at,
                p_expires_at, p_now, 'EXPIRED')
        ON CONFLICT ON CONSTRAINT redemption_pkey DO NOTHING
        RETURNING x.* INTO r;
        IF FOUND THEN
            RETURN QUERY SELECT 'APPLIED'::TEXT, r.customer_id, r.status, r.discount_amount,
                                r.expires_at;
            RETURN;
        END IF;
    END LOOP;
END;
$$;
