-- fg_merge: the one status change, for one order: the row moves to max(old, incoming) on the
-- lattice RESERVED < CONFIRMED < RELEASED and the counters by the change in activeness, in the
-- lock order customer -> slot -> budget -> campaign customer -> campaign counter. Every batch
-- path answers and stores exactly what it would (docs/ARCHITECTURE.md, "fg_merge").

CREATE OR REPLACE FUNCTION fg_merge(
    p_code text,
    p_order text,
    p_customer bigint,
    p_status smallint,
    p_order_amount bigint,
    p_discount bigint,
    p_reserved_at timestamp with time zone,
    p_expires_at timestamp with time zone,
    p_reason text,
    p_now timestamp with time zone,
    p_revoke boolean
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
    r         redemption%ROWTYPE;
    old_st    SMALLINT := 0;           -- 0 = no row
    new_st    SMALLINT;
    refusal   TEXT;
    v_slots   SMALLINT;
    v_per     INT;
    v_ttl     INT;
    taken     SMALLINT;
    v_camp    BIGINT;
    v_cper    INT;
    budgeted  BOOLEAN := false;
BEGIN
    IF p_status NOT IN (1, 2, 3) THEN
        RAISE EXCEPTION 'fg_merge: bad status %', p_status;
    END IF;
    -- A plain read: the voucher row is never locked or written by a status change.
    SELECT v.counter_slots, v.per_user_limit, v.reservation_ttl_seconds, v.campaign_id
      INTO v_slots, v_per, v_ttl, v_camp
      FROM voucher v WHERE v.code = p_code;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fg_merge: unknown voucher %', p_code USING ERRCODE = 'FG404';
    END IF;
    -- Every reservation the service grants expires exactly its voucher's TTL after it was made
    -- (the TTL never changes). A later expiry was not written by the service: an event copied
    -- or forged to hold a use for years. A constraint violation, so the consumer sends it to
    -- the dead letters at once.
    IF p_customer IS NOT NULL
       AND p_expires_at > p_reserved_at + make_interval(secs => v_ttl) THEN
        RAISE EXCEPTION 'expiresAt is more than the voucher''s reservation TTL (% s) after reservedAt', v_ttl
              USING ERRCODE = 'check_violation';
    END IF;

    LOOP
        -- A caller that knows the customer claims the key first: for a new reservation (every
        -- winner) that is the one statement it needs. A concurrent claimer of the same key
        -- blocks on the unique index until we commit, then finds our row below: retries of one
        -- order never both count. If we roll back instead, it claims the key itself.
        IF p_customer IS NOT NULL THEN
            INSERT INTO redemption AS x (voucher_code, order_id, customer_id, status,
                                         order_amount, discount_amount, reserved_at, expires_at,
                                         confirmed_at, released_at, release_reason)
            VALUES (p_code, p_order, p_customer, p_status, p_order_amount, p_discount,
                    p_reserved_at, p_expires_at,
                    CASE WHEN p_status = 2 THEN p_now END,
                    CASE WHEN p_status = 3 THEN p_now END,
                    CASE WHEN p_status = 3 THEN COALESCE(p_reason, 'CANCELLED') END)
            ON CONFLICT ON CONSTRAINT redemption_pkey DO NOTHING
            RETURNING x.* INTO r;
            EXIT WHEN FOUND;   -- old_st stays 0: the row is new
        END IF;
        SELECT * INTO r FROM redemption
         WHERE redemption.voucher_code = p_code AND redemption.order_id = p_order
           FOR UPDATE;
        IF FOUND THEN
            old_st := r.status;
            EXIT;
        END IF;
        IF p_customer IS NULL THEN
            RETURN QUERY SELECT 'NOT_FOUND'::TEXT, NULL::BIGINT, NULL::SMALLINT, NULL::BIGINT, NULL::TIMESTAMPTZ;
            RETURN;
        END IF;
        -- The row we met was rolled back meanwhile: claim the key again.
    END LOOP;

    IF old_st <> 0 AND p_customer IS NOT NULL AND r.customer_id <> p_customer THEN
        RETURN QUERY SELECT 'ORDER_CONFLICT'::TEXT, r.customer_id, r.status, r.discount_amount, r.expires_at;
        RETURN;
    END IF;

    new_st := GREATEST(old_st, p_status);
    IF old_st <> 0 AND new_st = old_st THEN
        RETURN QUERY SELECT 'UNCHANGED'::TEXT, r.customer_id, r.status, r.discount_amount, r.expires_at;
        RETURN;
    END IF;

    IF old_st <> 0 THEN
        UPDATE redemption AS x
           SET status         = new_st,
               confirmed_at   = CASE WHEN new_st = 2 THEN p_now ELSE x.confirmed_at END,
               released_at    = CASE WHEN new_st = 3 THEN p_now ELSE x.released_at END,
               release_reason = CASE WHEN new_st = 3 THEN COALESCE(p_reason, 'CANCELLED') END
         WHERE x.voucher_code = p_code AND x.order_id = p_order
        RETURNING x.* INTO r;
    END IF;

    -- Counters: the change in activeness moves `used` (slot) and `active` (customer); a change
    -- into or out of confirmed moves the slot's `confirmed`; a revocation slot 0's `revoked`.
    IF old_st IN (0, 3) AND new_st IN (1, 2) THEN
        -- Per-customer first: that row is private to one customer, so contention stays off the
        -- slots, which are touched last and held only until commit.
        INSERT INTO voucher_customer AS c (voucher_code, customer_id, active)
        VALUES (p_code, r.customer_id, 1)
        ON CONFLICT (voucher_code, customer_id)
        DO UPDATE SET active = c.active + 1 WHERE c.active < v_per;
        IF NOT FOUND THEN
            refusal := 'ALREADY_USED';
        ELSE
            -- Start from a slot chosen by the order, so concurrent winners spread out.
            taken := fg_take_slot(p_code, abs(hashtext(p_order) % v_slots), v_slots);
            IF taken IS NULL THEN
                refusal := 'OUT_OF_STOCK';
                UPDATE voucher_customer c SET active = c.active - 1
                 WHERE c.voucher_code = p_code AND c.customer_id = r.customer_id;
            ELSE
                -- The budget last (lock order), read after the slot's lock: a budget added
                -- meanwhile (under every slot's lock) is seen. A discount that does not fit
                -- gives back the slot's use and the customer's.
                UPDATE voucher_budget b SET used = b.used + r.discount_amount
                 WHERE b.voucher_code = p_code
                   AND (b.amount IS NULL OR b.used + r.discount_amount <= b.amount);
                budgeted := FOUND;
                IF NOT FOUND
                   AND EXISTS (SELECT 1 FROM voucher_budget b WHERE b.voucher_code = p_code) THEN
                    refusal := 'BUDGET_EXHAUSTED';
                END IF;
                -- A campaign's code: the campaign's counters after the code's own (lock
                -- order), the customer's over the campaign, then the campaign's uses and money.
                IF refusal IS NULL AND v_camp IS NOT NULL THEN
                    SELECT g.per_user_limit INTO v_cper FROM campaign g WHERE g.id = v_camp;
                    INSERT INTO campaign_customer AS c (campaign_id, customer_id, active)
                    VALUES (v_camp, r.customer_id, 1)
                    ON CONFLICT (campaign_id, customer_id)
                    DO UPDATE SET active = c.active + 1 WHERE v_cper IS NULL OR c.active < v_cper;
                    IF NOT FOUND THEN
                        refusal := 'ALREADY_USED';
                    ELSE
                        UPDATE campaign_counter k
                           SET used = k.used + 1, budget_used = k.budget_used + r.discount_amount
                         WHERE k.campaign_id = v_camp
                           AND (k.total_limit IS NULL OR k.used < k.total_limit)
                           AND (k.budget_amount IS NULL
                                OR k.budget_used + r.discount_amount <= k.budget_amount);
                        IF NOT FOUND THEN
                            SELECT CASE WHEN k.used >= k.total_limit THEN 'OUT_OF_STOCK'
                                        ELSE 'BUDGET_EXHAUSTED' END INTO refusal
                              FROM campaign_counter k WHERE k.campaign_id = v_camp;
                            UPDATE campaign_customer c SET active = c.active - 1
                             WHERE c.campaign_id = v_camp AND c.customer_id = r.customer_id;
                        END IF;
                    END IF;
                END IF;
                -- Refused after the slot: give back what was taken, in the same order.
                IF refusal IS NOT NULL THEN
                    UPDATE voucher_slot s SET used = s.used - 1
                     WHERE s.voucher_code = p_code AND s.slot = taken;
                    IF budgeted THEN
                        UPDATE voucher_budget b SET used = b.used - r.discount_amount
                         WHERE b.voucher_code = p_code;
                    END IF;
                    UPDATE voucher_customer c SET active = c.active - 1
                     WHERE c.voucher_code = p_code AND c.customer_id = r.customer_id;
                END IF;
                IF refusal IS NULL THEN
                    UPDATE redemption AS x SET slot = taken
                     WHERE x.voucher_code = p_code AND x.order_id = p_order
                    RETURNING x.* INTO r;
                    IF new_st = 2 THEN
                        UPDATE voucher_slot s SET confirmed = s.confirmed + 1
                         WHERE s.voucher_code = p_code AND s.slot = taken;
                    END IF;
                END IF;
            END IF;
        END IF;

        IF refusal IS NOT NULL THEN
            IF NOT p_revoke THEN
                RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = refusal;
            END IF;
            UPDATE redemption AS x
               SET status = 3, released_at = p_now, release_reason = 'REVOKED'
             WHERE x.voucher_code = p_code AND x.order_id = p_order
            RETURNING x.* INTO r;
            -- A revocation holds no slot; slot 0, which every voucher has, counts them.
            UPDATE voucher_slot s SET revoked = s.revoked + 1
             WHERE s.voucher_code = p_code AND s.slot = 0;
            RETURN QUERY SELECT 'REVOKED'::TEXT, r.customer_id, r.status, r.discount_amount, r.expires_at;
            RETURN;
        END IF;
    ELSIF old_st = 1 AND new_st = 2 THEN
        UPDATE voucher_slot s SET confirmed = s.confirmed + 1
         WHERE s.voucher_code = p_code AND s.slot = r.slot;
    ELSIF old_st IN (1, 2) AND new_st = 3 THEN
        UPDATE voucher_customer c SET active = c.active - 1
         WHERE c.voucher_code = p_code AND c.customer_id = r.customer_id;
        UPDATE voucher_slot s
           SET used = s.used - 1,
               confirmed = s.confirmed - CASE WHEN old_st = 2 THEN 1 ELSE 0 END
         WHERE s.voucher_code = p_code AND s.slot = r.slot;
        UPDATE voucher_budget b SET used = b.used - r.discount_amount
         WHERE b.voucher_code = p_code;
        IF v_camp IS NOT NULL THEN
            UPDATE campaign_customer c SET active = c.active - 1
             WHERE c.campaign_id = v_camp AND c.customer_id = r.customer_id;
            UPDATE campaign_counter k
               SET used = k.used - 1, budget_used = k.budget_used - r.discount_amount
             WHERE k.campaign_id = v_camp;
        END IF;
    END IF;

    RETURN QUERY SELECT 'APPLIED'::TEXT, r.customer_id, r.status, r.discount_amount, r.expires_at;
END;
$$;
