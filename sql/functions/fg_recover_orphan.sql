-- fg_recover_orphan: an orphan's tombstone (the order was pending in the gate past its TTL with
-- no row): written only where no row exists or the row is still RESERVED, under the row's lock,
-- so a confirm that wrote the row since the sweep looked wins (docs/ARCHITECTURE.md, "The
-- sweeper").

CREATE OR REPLACE FUNCTION fg_recover_orphan(
    p_code text,
    p_order text,
    p_customer bigint,
    p_order_amount bigint,
    p_discount bigint,
    p_reserved_at timestamp with time zone,
    p_expires_at timestamp with time zone,
    p_now timestamp with time zone
)
RETURNS TABLE(
    outcome text,
    customer_id bigint,
    status smallint,
    discount_amount bigint,
    expires_at timestamp with time zone
)
LANGUAGE plpgsql
AS $$
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
