-- The voucher's whole life: change it after creation, pause it, percentage discounts, and a
-- read-only eligibility check.
--
-- A voucher changes only through `PATCH /vouchers/{code}`, which locks its row (so changes are
-- serialised), bumps `version`, and, for a new total_limit, re-splits the caps with
-- fg_resize_slots under the slots' locks. Postgres still refuses use total_limit + 1 on its own:
-- each slot's CHECK keeps used <= cap, and the deferred caps-sum trigger (V3) keeps the caps
-- summing to the new limit at commit.

ALTER TABLE voucher
    -- false: paused. Reserves are refused (NOT_ELIGIBLE, INACTIVE); confirm, release and expiry
    -- go on.
    ADD COLUMN active BOOLEAN NOT NULL DEFAULT true,
    -- A percentage discount instead of a fixed amount, optionally capped.
    ADD COLUMN discount_percent SMALLINT CHECK (discount_percent BETWEEN 1 AND 100),
    ADD COLUMN max_discount_amount BIGINT CHECK (max_discount_amount BETWEEN 0 AND 1000000000000000),
    -- Bumped by every change: the gate keeps the version its rules came from, so that a sweep
    -- that read older rules never writes them over newer ones.
    ADD COLUMN version BIGINT NOT NULL DEFAULT 1;

ALTER TABLE voucher ALTER COLUMN discount_amount DROP NOT NULL;
ALTER TABLE voucher
    ADD CONSTRAINT voucher_one_discount
        CHECK ((discount_amount IS NULL) <> (discount_percent IS NULL)),
    ADD CONSTRAINT voucher_cap_only_with_percent
        CHECK (max_discount_amount IS NULL OR discount_percent IS NOT NULL);

-- fg_discount: the discount a reservation of p_amount is given, fixed at reserve time and stored
-- on the redemption. A percentage rounds down and stops at its cap. lua/rules.lua computes the
-- same for the gate; a test checks the two agree.
CREATE FUNCTION fg_discount(p_amount BIGINT, p_fixed BIGINT, p_percent SMALLINT, p_cap BIGINT)
RETURNS BIGINT
LANGUAGE sql IMMUTABLE AS $$
    -- LEAST ignores a NULL cap.
    SELECT CASE WHEN p_percent IS NULL THEN p_fixed
                ELSE LEAST(p_amount * p_percent / 100, p_cap) END;
$$;

-- fg_validate: would a reserve of this customer and amount be granted now? Reads only. Answers
-- ELIGIBLE with the discount and the reservation's TTL, or the refusal, in the order reserve
-- decides (the gate's lua/rules.lua decides in the same order).
CREATE FUNCTION fg_validate(
    p_code          TEXT,
    p_customer      BIGINT,
    p_order_amount  BIGINT,
    p_now           TIMESTAMPTZ
) RETURNS TABLE (
    outcome                  TEXT,
    discount_amount          BIGINT,
    reservation_ttl_seconds  INT
)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    s  RECORD;
BEGIN
    SELECT v.*, COALESCE(c.active, 0) AS customer_active,
           EXISTS (SELECT 1 FROM voucher_slot vs
                    WHERE vs.voucher_code = v.code AND vs.used < vs.cap) AS has_room
      INTO s
      FROM voucher v
      LEFT JOIN voucher_customer c ON c.voucher_code = v.code AND c.customer_id = p_customer
     WHERE v.code = p_code;
    IF NOT FOUND THEN
        outcome := 'VOUCHER_NOT_FOUND';
    ELSIF NOT s.active THEN
        outcome := 'INACTIVE';
    ELSIF p_now < s.starts_at THEN
        outcome := 'NOT_STARTED';
    ELSIF p_now >= s.ends_at THEN
        outcome := 'EXPIRED';
    ELSIF p_order_amount < s.min_order_amount THEN
        outcome := 'MIN_ORDER_AMOUNT';
    ELSIF s.customer_active >= s.per_user_limit THEN
        outcome := 'ALREADY_USED';
    ELSIF NOT s.has_room THEN
        outcome := 'OUT_OF_STOCK';
    ELSE
        outcome := 'ELIGIBLE';
    END IF;
    IF outcome = 'ELIGIBLE' THEN
        discount_amount := fg_discount(p_order_amount, s.discount_amount, s.discount_percent,
                                       s.max_discount_amount);
        reservation_ttl_seconds := s.reservation_ttl_seconds;
    END IF;
    RETURN NEXT;
END;
$$;

-- fg_reserve, now with pausing and percentage discounts: a retry of the order answers from its
-- row; otherwise fg_validate decides and fg_merge takes the use under lock. Same outcomes as
-- before (see V1, V3), plus INACTIVE.
CREATE OR REPLACE FUNCTION fg_reserve(
    p_code          TEXT,
    p_order         TEXT,
    p_customer      BIGINT,
    p_order_amount  BIGINT,
    p_now           TIMESTAMPTZ
) RETURNS TABLE (
    outcome          TEXT,
    customer_id      BIGINT,
    status           SMALLINT,
    discount_amount  BIGINT,
    expires_at       TIMESTAMPTZ
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    r  RECORD;
    e  RECORD;
    m  RECORD;
BEGIN
    SELECT x.customer_id, x.status, x.discount_amount, x.expires_at INTO r
      FROM redemption x WHERE x.voucher_code = p_code AND x.order_id = p_order;
    IF FOUND THEN
        RETURN QUERY SELECT
            CASE WHEN r.customer_id <> p_customer THEN 'ORDER_CONFLICT'
                 WHEN r.status = 3 THEN 'RESERVATION_RELEASED'
                 ELSE 'REPLAY' END,
            r.customer_id, r.status, r.discount_amount, r.expires_at;
        RETURN;
    END IF;
    SELECT * INTO e FROM fg_validate(p_code, p_customer, p_order_amount, p_now);
    IF e.outcome <> 'ELIGIBLE' THEN
        RETURN QUERY SELECT e.outcome, NULL::BIGINT, NULL::SMALLINT, NULL::BIGINT, NULL::TIMESTAMPTZ;
        RETURN;
    END IF;

    SELECT * INTO m FROM fg_merge(p_code, p_order, p_customer, 1::SMALLINT, p_order_amount,
                                  e.discount_amount, p_now,
                                  p_now + make_interval(secs => e.reservation_ttl_seconds),
                                  NULL, p_now, false);
    RETURN QUERY SELECT
        CASE m.outcome
            WHEN 'APPLIED' THEN 'RESERVED'
            WHEN 'UNCHANGED' THEN CASE WHEN m.status = 3 THEN 'RESERVATION_RELEASED' ELSE 'REPLAY' END
            ELSE m.outcome END,
        m.customer_id, m.status, m.discount_amount, m.expires_at;
END;
$$;

-- fg_resize_slots: the one function that changes a voucher's limit after creation. Locks every
-- slot in slot order (the order every taker and fg_expire lock them in), refuses with FG409
-- LIMIT_BELOW_USED when the uses held exceed p_limit, then gives each slot its uses held plus an
-- even share of the room left, and sets total_limit. The caller holds the voucher row's lock.
CREATE FUNCTION fg_resize_slots(p_code TEXT, p_limit INT) RETURNS BIGINT
LANGUAGE plpgsql AS $$
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

-- fg_patch_voucher: writes a voucher's new rules, given the version they were computed from.
-- Answers NOT_FOUND, STALE (another change landed since that version: nothing written; the
-- caller reads again and recomputes) or APPLIED with the new version. A new total_limit goes
-- through fg_resize_slots, which raises FG409 LIMIT_BELOW_USED (nothing written).
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
    p_active            BOOLEAN
) RETURNS TABLE (outcome TEXT, version BIGINT)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v  RECORD;
BEGIN
    SELECT x.version, x.total_limit INTO v FROM voucher x WHERE x.code = p_code FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'NOT_FOUND'::TEXT, NULL::BIGINT;
        RETURN;
    END IF;
    IF v.version <> p_version THEN
        RETURN QUERY SELECT 'STALE'::TEXT, v.version;
        RETURN;
    END IF;
    IF p_total_limit <> v.total_limit THEN
        PERFORM fg_resize_slots(p_code, p_total_limit);
    END IF;
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
