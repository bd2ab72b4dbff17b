-- Flashgate schema: Postgres is the source of truth and the last line of defence.
-- Every limit the service promises is also a constraint or a conditional write here,
-- so that no bug in a layer above can hand out use total_limit + 1.

CREATE TABLE voucher (
    code                     TEXT        PRIMARY KEY CHECK (code ~ '^[A-Z0-9_-]{1,32}$'),
    discount_amount          BIGINT      NOT NULL CHECK (discount_amount BETWEEN 0 AND 1000000000000000),
    min_order_amount         BIGINT      NOT NULL DEFAULT 0 CHECK (min_order_amount BETWEEN 0 AND 1000000000000000),
    total_limit              INT         NOT NULL CHECK (total_limit BETWEEN 1 AND 1000000000),
    per_user_limit           INT         NOT NULL DEFAULT 1 CHECK (per_user_limit >= 1),
    -- Number of RESERVED + CONFIRMED redemptions. Moved only by fg_merge.
    used_count               INT         NOT NULL DEFAULT 0,
    starts_at                TIMESTAMPTZ NOT NULL,
    ends_at                  TIMESTAMPTZ NOT NULL,
    flash_sale               BOOLEAN     NOT NULL DEFAULT false,
    reservation_ttl_seconds  INT         NOT NULL DEFAULT 900 CHECK (reservation_ttl_seconds BETWEEN 1 AND 604800),
    created_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT voucher_used_count_within_limit CHECK (used_count <= total_limit),
    CONSTRAINT voucher_used_count_not_negative CHECK (used_count >= 0),
    CONSTRAINT voucher_window_ordered CHECK (ends_at > starts_at)
);

-- No foreign keys to voucher, on purpose: a foreign-key check takes a KEY SHARE lock on the
-- voucher row, and with every reserve also updating that row, each transaction would turn the
-- hot row's lock into a MultiXact. Vouchers are never deleted, and fg_merge checks the voucher
-- exists before it writes, so the keys would guard nothing.

-- Active (RESERVED + CONFIRMED) uses per customer. A counter rather than
-- UNIQUE (voucher_code, customer_id): that constraint would block a customer forever after a
-- release, and is wrong for per_user_limit > 1.
CREATE TABLE voucher_customer (
    voucher_code  TEXT   NOT NULL,
    customer_id   BIGINT NOT NULL CHECK (customer_id >= 1),
    active        INT    NOT NULL CHECK (active >= 0),
    PRIMARY KEY (voucher_code, customer_id)
);

-- One row per (voucher, order): the reservation. status: 1 RESERVED, 2 CONFIRMED, 3 RELEASED.
CREATE TABLE redemption (
    voucher_code     TEXT        NOT NULL,
    order_id         TEXT        NOT NULL CHECK (order_id ~ '^[A-Za-z0-9_.:-]{1,64}$'),
    customer_id      BIGINT      NOT NULL CHECK (customer_id >= 1),
    status           SMALLINT    NOT NULL CHECK (status IN (1, 2, 3)),
    order_amount     BIGINT      NOT NULL CHECK (order_amount BETWEEN 0 AND 1000000000000000),
    discount_amount  BIGINT      NOT NULL,
    reserved_at      TIMESTAMPTZ NOT NULL,
    expires_at       TIMESTAMPTZ NOT NULL,
    confirmed_at     TIMESTAMPTZ,
    released_at      TIMESTAMPTZ,
    release_reason   TEXT        CHECK (release_reason IN ('CANCELLED', 'EXPIRED', 'REVOKED')),
    PRIMARY KEY (voucher_code, order_id),
    CONSTRAINT redemption_released_has_reason CHECK ((status = 3) = (release_reason IS NOT NULL))
);

-- The sweeper looks for RESERVED rows past their expiry; keep that an index scan.
CREATE INDEX redemption_reserved_expiry ON redemption (expires_at) WHERE status = 1;

-- fg_merge: the one way any redemption changes status.
--
-- Status only grows (RESERVED 1 < CONFIRMED 2 < RELEASED 3), so a write is a merge:
-- new = max(old, incoming). Counters move by the change in activeness
-- (active = status in {1, 2}; a missing row is inactive): none -> R/C is +1, R/C -> X is -1.
-- Replaying an event, or applying two in any order, gives the same row and the same counters.
--
-- p_customer NULL means "the caller only knows the key" (confirm and release from the API):
-- a missing row is then NOT_FOUND instead of being created.
-- When a +1 is refused (voucher full, or customer at per_user_limit):
--   p_revoke = false: raise SQLSTATE FG409 with the reason as message, rolling back the whole call
--                     (the API's reserve: nothing is written on a refusal);
--   p_revoke = true:  store the row RELEASED with reason REVOKED and return REVOKED
--                     (an event whose use the gate granted but Postgres cannot honour).
--
-- outcome: APPLIED (row created or status raised), UNCHANGED (incoming <= stored),
--          ORDER_CONFLICT (the key belongs to another customer), NOT_FOUND, REVOKED.
CREATE FUNCTION fg_merge(
    p_code           TEXT,
    p_order          TEXT,
    p_customer       BIGINT,
    p_status         SMALLINT,
    p_order_amount   BIGINT,
    p_discount       BIGINT,
    p_reserved_at    TIMESTAMPTZ,
    p_expires_at     TIMESTAMPTZ,
    p_reason         TEXT,
    p_now            TIMESTAMPTZ,
    p_revoke         BOOLEAN
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
    r         redemption%ROWTYPE;
    old_st    SMALLINT := 0;           -- 0 = no row
    new_st    SMALLINT;
    refusal   TEXT;
BEGIN
    IF p_status NOT IN (1, 2, 3) THEN
        RAISE EXCEPTION 'fg_merge: bad status %', p_status;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM voucher v WHERE v.code = p_code) THEN
        RAISE EXCEPTION 'fg_merge: unknown voucher %', p_code USING ERRCODE = 'FG404';
    END IF;

    LOOP
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
        -- Claim the key. A concurrent claimer of the same key blocks on the unique index until
        -- we commit, then finds our row on its next turn: retries of one order never both
        -- count. If we roll back instead, it claims the key itself.
        INSERT INTO redemption AS x (voucher_code, order_id, customer_id, status, order_amount,
                                     discount_amount, reserved_at, expires_at,
                                     confirmed_at, released_at, release_reason)
        VALUES (p_code, p_order, p_customer, p_status, p_order_amount, p_discount,
                p_reserved_at, p_expires_at,
                CASE WHEN p_status = 2 THEN p_now END,
                CASE WHEN p_status = 3 THEN p_now END,
                CASE WHEN p_status = 3 THEN COALESCE(p_reason, 'CANCELLED') END)
        ON CONFLICT ON CONSTRAINT redemption_pkey DO NOTHING
        RETURNING x.* INTO r;
        EXIT WHEN FOUND;   -- old_st stays 0: the row is new
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

    -- Counters: only the change in activeness moves them.
    IF old_st IN (0, 3) AND new_st IN (1, 2) THEN
        -- Per-customer first: that row is private to one customer, so contention stays off the
        -- voucher row, which is touched last and held only until commit.
        INSERT INTO voucher_customer AS c (voucher_code, customer_id, active)
        SELECT p_code, r.customer_id, 1
          FROM voucher v WHERE v.code = p_code
        ON CONFLICT (voucher_code, customer_id)
        DO UPDATE SET active = c.active + 1
         WHERE c.active < (SELECT v.per_user_limit FROM voucher v WHERE v.code = p_code);
        IF NOT FOUND THEN
            refusal := 'ALREADY_USED';
        ELSE
            UPDATE voucher v SET used_count = v.used_count + 1
             WHERE v.code = p_code AND v.used_count < v.total_limit;
            IF NOT FOUND THEN
                refusal := 'OUT_OF_STOCK';
                UPDATE voucher_customer c SET active = c.active - 1
                 WHERE c.voucher_code = p_code AND c.customer_id = r.customer_id;
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
            RETURN QUERY SELECT 'REVOKED'::TEXT, r.customer_id, r.status, r.discount_amount, r.expires_at;
            RETURN;
        END IF;
    ELSIF old_st IN (1, 2) AND new_st = 3 THEN
        UPDATE voucher_customer c SET active = c.active - 1
         WHERE c.voucher_code = p_code AND c.customer_id = r.customer_id;
        UPDATE voucher v SET used_count = v.used_count - 1 WHERE v.code = p_code;
    END IF;

    RETURN QUERY SELECT 'APPLIED'::TEXT, r.customer_id, r.status, r.discount_amount, r.expires_at;
END;
$$;

-- fg_reserve: standard-mode reserve in one round trip.
-- One read, one snapshot, gives the voucher, this order's row and the customer's active uses;
-- deciding from a single snapshot keeps answers stable: a retry racing its first attempt either
-- sees the committed row (REPLAY) or sees none of its effects and meets it in fg_merge.
-- Then: idempotency (a retry is answered from the stored row even after the window closed),
-- eligibility, short cuts that write nothing (per-user limit before stock, so a refusal repeats
-- the same way while nothing is released), and fg_merge.
-- outcome: RESERVED (new), REPLAY (same customer, row active), ORDER_CONFLICT,
--          RESERVATION_RELEASED, VOUCHER_NOT_FOUND, NOT_STARTED, EXPIRED, MIN_ORDER_AMOUNT,
--          ALREADY_USED, OUT_OF_STOCK; a refusal found under lock arrives as SQLSTATE FG409.
CREATE FUNCTION fg_reserve(
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
    s  RECORD;
    m  RECORD;
    refusal TEXT;
BEGIN
    SELECT v.*, r.customer_id AS r_customer, r.status AS r_status,
           r.discount_amount AS r_discount, r.expires_at AS r_expires,
           COALESCE(c.active, 0) AS customer_active
      INTO s
      FROM voucher v
      LEFT JOIN redemption r ON r.voucher_code = v.code AND r.order_id = p_order
      LEFT JOIN voucher_customer c ON c.voucher_code = v.code AND c.customer_id = p_customer
     WHERE v.code = p_code;
    IF NOT FOUND THEN
        refusal := 'VOUCHER_NOT_FOUND';
    ELSIF s.r_status IS NOT NULL THEN
        RETURN QUERY SELECT
            CASE WHEN s.r_customer <> p_customer THEN 'ORDER_CONFLICT'
                 WHEN s.r_status = 3 THEN 'RESERVATION_RELEASED'
                 ELSE 'REPLAY' END,
            s.r_customer, s.r_status, s.r_discount, s.r_expires;
        RETURN;
    ELSIF p_now < s.starts_at THEN
        refusal := 'NOT_STARTED';
    ELSIF p_now >= s.ends_at THEN
        refusal := 'EXPIRED';
    ELSIF p_order_amount < s.min_order_amount THEN
        refusal := 'MIN_ORDER_AMOUNT';
    ELSIF s.customer_active >= s.per_user_limit THEN
        refusal := 'ALREADY_USED';
    ELSIF s.used_count >= s.total_limit THEN
        refusal := 'OUT_OF_STOCK';
    END IF;
    IF refusal IS NOT NULL THEN
        RETURN QUERY SELECT refusal, NULL::BIGINT, NULL::SMALLINT, NULL::BIGINT, NULL::TIMESTAMPTZ;
        RETURN;
    END IF;

    SELECT * INTO m FROM fg_merge(p_code, p_order, p_customer, 1::SMALLINT, p_order_amount,
                                  s.discount_amount, p_now,
                                  p_now + make_interval(secs => s.reservation_ttl_seconds),
                                  NULL, p_now, false);
    RETURN QUERY SELECT
        CASE m.outcome
            WHEN 'APPLIED' THEN 'RESERVED'
            WHEN 'UNCHANGED' THEN CASE WHEN m.status = 3 THEN 'RESERVATION_RELEASED' ELSE 'REPLAY' END
            ELSE m.outcome END,
        m.customer_id, m.status, m.discount_amount, m.expires_at;
END;
$$;
