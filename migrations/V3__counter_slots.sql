-- Counter slots: a hot voucher without a hot row.
--
-- Every winner used to add 1 to voucher.used_count, one row whose lock each transaction held
-- until its commit was flushed: a sale's winners went through Postgres one commit at a time.
-- The limit is now split across counter_slots rows of voucher_slot, each with its own cap and
-- used count; a reserve takes a use from one slot with room, so up to counter_slots winners
-- commit at once. The voucher row is read by reserve, never written.
--
-- Postgres still refuses use total_limit + 1 on its own: each slot's CHECK keeps used <= cap,
-- and a deferred constraint trigger keeps the caps summing to total_limit at every commit.

CREATE TABLE voucher_slot (
    voucher_code  TEXT     NOT NULL,
    slot          SMALLINT NOT NULL CHECK (slot BETWEEN 0 AND 63),
    cap           INT      NOT NULL CHECK (cap >= 0),
    -- RESERVED + CONFIRMED redemptions holding a use of this slot. Moved only by fg_merge.
    used          INT      NOT NULL DEFAULT 0,
    PRIMARY KEY (voucher_code, slot),
    CONSTRAINT voucher_slot_used_within_cap CHECK (used BETWEEN 0 AND cap)
);

ALTER TABLE voucher
    ADD COLUMN counter_slots SMALLINT NOT NULL DEFAULT 1 CHECK (counter_slots BETWEEN 1 AND 64);

-- The slot a redemption's use was taken from (NULL: it never held one), so that release,
-- expiry and revocation give the use back where it came from.
ALTER TABLE redemption ADD COLUMN slot SMALLINT;

-- Vouchers created before slots keep their counts: one slot holding the whole limit.
INSERT INTO voucher_slot (voucher_code, slot, cap, used)
SELECT code, 0, total_limit, used_count FROM voucher;
UPDATE redemption SET slot = 0 WHERE status IN (1, 2);

ALTER TABLE voucher DROP COLUMN used_count;

-- A voucher's active uses (RESERVED + CONFIRMED): the sum of its slots. The one definition,
-- read by the voucher view, warm-up and reconciliation.
CREATE FUNCTION fg_used(p_code TEXT) RETURNS BIGINT
LANGUAGE sql STABLE AS $$
    SELECT COALESCE(sum(used), 0) FROM voucher_slot WHERE voucher_code = p_code;
$$;

-- The caps of a voucher's slots sum to its total_limit: checked at commit, after every change
-- to a cap or to the limit (a reserve changes `used` only, so it never runs this).
CREATE FUNCTION fg_check_slot_caps() RETURNS TRIGGER
LANGUAGE plpgsql AS $$
DECLARE
    v_code   TEXT;
    v_limit  INT;
    v_caps   BIGINT;
BEGIN
    IF TG_TABLE_NAME = 'voucher' THEN
        v_code := NEW.code;
    ELSE
        v_code := COALESCE(NEW.voucher_code, OLD.voucher_code);
    END IF;
    SELECT total_limit INTO v_limit FROM voucher WHERE code = v_code;
    SELECT COALESCE(sum(cap), 0) INTO v_caps FROM voucher_slot WHERE voucher_code = v_code;
    IF v_limit IS NOT NULL AND v_caps <> v_limit THEN
        RAISE EXCEPTION 'voucher %: slot caps sum to %, total_limit is %', v_code, v_caps, v_limit
              USING ERRCODE = 'check_violation', CONSTRAINT = 'voucher_slot_caps_sum';
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER voucher_slot_caps_sum
    AFTER INSERT OR DELETE OR UPDATE OF cap, voucher_code ON voucher_slot
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION fg_check_slot_caps();

CREATE CONSTRAINT TRIGGER voucher_total_limit_caps_sum
    AFTER INSERT OR UPDATE OF total_limit ON voucher
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION fg_check_slot_caps();

-- fg_set_slots: the one function that sets caps. Splits p_limit over p_slots slots as evenly
-- as integers allow (the first p_limit % p_slots get one more). Called when a voucher is
-- created, in the same transaction.
CREATE FUNCTION fg_set_slots(p_code TEXT, p_limit INT, p_slots SMALLINT) RETURNS VOID
LANGUAGE sql AS $$
    INSERT INTO voucher_slot (voucher_code, slot, cap)
    SELECT p_code, s, p_limit / p_slots + CASE WHEN s < p_limit % p_slots THEN 1 ELSE 0 END
      FROM generate_series(0, p_slots - 1) AS s
    ON CONFLICT (voucher_code, slot) DO UPDATE SET cap = EXCLUDED.cap;
$$;

-- fg_take_slot: takes one use from a slot with room and answers the slot, or NULL when every
-- slot is full. It prefers the slots from p_start on, going round.
--
-- First pass: the first slot with room that no other transaction holds (SKIP LOCKED), so a
-- winner does not queue behind another winner's commit while a free slot exists. When every
-- slot with room is held by someone (near sold out), second pass: lock every slot of the
-- voucher, in slot order (the order every taker and fg_expire lock them in, so they never
-- deadlock). A locked row is read at its latest committed version, so this pass sees what the
-- others' commits left: the answer is NULL only when every slot is really full, never because
-- free ones were momentarily locked, nor because a use came back after this statement began.
CREATE FUNCTION fg_take_slot(p_code TEXT, p_start INT, p_slots INT) RETURNS SMALLINT
LANGUAGE plpgsql AS $$
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

-- fg_merge, now with slots: a +1 takes a use from a slot (fg_take_slot) and records it on the
-- redemption; a -1 gives it back to that slot. Everything else is as before (see V1).
CREATE OR REPLACE FUNCTION fg_merge(
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
    v_slots   SMALLINT;
    v_per     INT;
    taken     SMALLINT;
BEGIN
    IF p_status NOT IN (1, 2, 3) THEN
        RAISE EXCEPTION 'fg_merge: bad status %', p_status;
    END IF;
    -- A plain read: the voucher row is never locked or written by a status change.
    SELECT v.counter_slots, v.per_user_limit INTO v_slots, v_per FROM voucher v WHERE v.code = p_code;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fg_merge: unknown voucher %', p_code USING ERRCODE = 'FG404';
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

    -- Counters: only the change in activeness moves them.
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
                UPDATE redemption AS x SET slot = taken
                 WHERE x.voucher_code = p_code AND x.order_id = p_order
                RETURNING x.* INTO r;
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
        UPDATE voucher_slot s SET used = s.used - 1
         WHERE s.voucher_code = p_code AND s.slot = r.slot;
    END IF;

    RETURN QUERY SELECT 'APPLIED'::TEXT, r.customer_id, r.status, r.discount_amount, r.expires_at;
END;
$$;

-- fg_reserve, now with slots: the sold-out short cut asks, in the same snapshot, whether any slot
-- has room (it stops at the first that has).
-- Everything else is as before (see V1).
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
    s  RECORD;
    m  RECORD;
    refusal TEXT;
BEGIN
    SELECT v.*, r.customer_id AS r_customer, r.status AS r_status,
           r.discount_amount AS r_discount, r.expires_at AS r_expires,
           COALESCE(c.active, 0) AS customer_active,
           EXISTS (SELECT 1 FROM voucher_slot vs
                    WHERE vs.voucher_code = v.code AND vs.used < vs.cap) AS has_room
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
    ELSIF NOT s.has_room THEN
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

-- fg_expire, now with slots: the lock taken up front is on the released rows' slots (customer
-- rows, then slots, in key order, as reserve and release take them), not on the voucher row.
CREATE OR REPLACE FUNCTION fg_expire(p_now TIMESTAMPTZ, p_limit INT)
RETURNS TABLE (voucher_code TEXT, order_id TEXT, customer_id BIGINT, flash_sale BOOLEAN)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    codes      TEXT[];
    orders     TEXT[];
    customers  BIGINT[];
    slots      SMALLINT[];
    m          RECORD;
BEGIN
    SELECT array_agg(d.voucher_code ORDER BY d.voucher_code, d.order_id),
           array_agg(d.order_id ORDER BY d.voucher_code, d.order_id),
           array_agg(d.customer_id ORDER BY d.voucher_code, d.order_id),
           array_agg(d.slot ORDER BY d.voucher_code, d.order_id)
      INTO codes, orders, customers, slots
      FROM (SELECT r.voucher_code, r.order_id, r.customer_id, r.slot
              FROM redemption r
             WHERE r.status = 1 AND r.expires_at < p_now
             ORDER BY r.expires_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) d;
    IF codes IS NULL THEN
        RETURN;
    END IF;

    PERFORM 1 FROM voucher_customer c
      JOIN (SELECT DISTINCT unnest(codes) AS code, unnest(customers) AS customer) k
        ON c.voucher_code = k.code AND c.customer_id = k.customer
     ORDER BY c.voucher_code, c.customer_id
       FOR UPDATE OF c;
    PERFORM 1 FROM voucher_slot s
      JOIN (SELECT DISTINCT unnest(codes) AS code, unnest(slots) AS slot) k
        ON s.voucher_code = k.code AND s.slot = k.slot
     ORDER BY s.voucher_code, s.slot
       FOR UPDATE OF s;

    FOR i IN 1 .. array_length(codes, 1) LOOP
        SELECT * INTO m FROM fg_merge(codes[i], orders[i], NULL, 3::SMALLINT, NULL, NULL,
                                      NULL, NULL, 'EXPIRED', p_now, false);
        IF m.outcome = 'APPLIED' THEN
            voucher_code := codes[i];
            order_id := orders[i];
            customer_id := customers[i];
            flash_sale := (SELECT v.flash_sale FROM voucher v WHERE v.code = codes[i]);
            RETURN NEXT;
        END IF;
    END LOOP;
END;
$$;
