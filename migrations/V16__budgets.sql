-- Money budgets: a voucher may give away at most `budgetAmount` in discounts, summed over its
-- active uses (RESERVED and CONFIRMED), whatever the order sizes. The count limit says how many
-- uses; the budget says how much money they may take.
--
-- The budget is a money counter kept beside the slots, with the same guarantee: Postgres
-- refuses a commit that would take the voucher past it, whatever any layer above did
-- (`voucher_budget_used_within_amount`). One row per voucher that has (or ever had) a budget;
-- a voucher without one has no row and pays nothing. fg_merge, the one function that changes a
-- redemption's status, moves `used` by the discount of every use that becomes active or stops
-- being so; a new use whose discount does not fit is refused BUDGET_EXHAUSTED (revoked, for a
-- change the gate already granted) and gives back the slot and customer count it took.
--
-- Lock order: customer counter, slots, then the budget, in every function, so a budget change
-- never closes a cycle with a batch of reserves. The row is one per voucher: winners of a
-- budgeted voucher serialize on it for their commit, as a batch (group commit) rather than one
-- by one.
--
-- Removing a budget (PATCH budgetAmount null) keeps the row with a NULL amount and the counter
-- running, so putting one back needs no pass over the voucher's uses. Adding one to a voucher
-- that never had one counts its active uses once, under every slot's lock.

CREATE TABLE voucher_budget (
    voucher_code TEXT PRIMARY KEY,   -- no foreign key: see V1 and "The schema"
    amount       BIGINT CHECK (amount >= 0 AND amount <= 1000000000000000),
    used         BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT voucher_budget_used_within_amount CHECK (used >= 0 AND (amount IS NULL OR used <= amount))
);

-- fg_validate: as in V5, with BUDGET_EXHAUSTED after OUT_OF_STOCK: the budget left is smaller
-- than this reserve's discount.
CREATE OR REPLACE FUNCTION fg_validate(
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
    d  BIGINT;
BEGIN
    SELECT v.*, COALESCE(c.active, 0) AS customer_active,
           EXISTS (SELECT 1 FROM voucher_slot vs
                    WHERE vs.voucher_code = v.code AND vs.used < vs.cap) AS has_room,
           b.amount - b.used AS budget_left
      INTO s
      FROM voucher v
      LEFT JOIN voucher_customer c ON c.voucher_code = v.code AND c.customer_id = p_customer
      LEFT JOIN voucher_budget b ON b.voucher_code = v.code
     WHERE v.code = p_code;
    IF FOUND THEN
        d := fg_discount(p_order_amount, s.discount_amount, s.discount_percent,
                         s.max_discount_amount);
    END IF;
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
    ELSIF s.budget_left < d THEN
        outcome := 'BUDGET_EXHAUSTED';
    ELSE
        outcome := 'ELIGIBLE';
    END IF;
    IF outcome = 'ELIGIBLE' THEN
        discount_amount := d;
        reservation_ttl_seconds := s.reservation_ttl_seconds;
    END IF;
    RETURN NEXT;
END;
$$;

-- fg_merge: as in V7, with the budget moved by every use that becomes active or stops being
-- so, and a new use refused BUDGET_EXHAUSTED when its discount does not fit.
CREATE OR REPLACE FUNCTION fg_merge(p_code text, p_order text, p_customer bigint, p_status smallint, p_order_amount bigint, p_discount bigint, p_reserved_at timestamp with time zone, p_expires_at timestamp with time zone, p_reason text, p_now timestamp with time zone, p_revoke boolean) RETURNS TABLE(outcome text, customer_id bigint, status smallint, discount_amount bigint, expires_at timestamp with time zone)
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
BEGIN
    IF p_status NOT IN (1, 2, 3) THEN
        RAISE EXCEPTION 'fg_merge: bad status %', p_status;
    END IF;
    -- A plain read: the voucher row is never locked or written by a status change.
    SELECT v.counter_slots, v.per_user_limit, v.reservation_ttl_seconds INTO v_slots, v_per, v_ttl
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
                IF NOT FOUND
                   AND EXISTS (SELECT 1 FROM voucher_budget b WHERE b.voucher_code = p_code) THEN
                    refusal := 'BUDGET_EXHAUSTED';
                    UPDATE voucher_slot s SET used = s.used - 1
                     WHERE s.voucher_code = p_code AND s.slot = taken;
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
    END IF;

    RETURN QUERY SELECT 'APPLIED'::TEXT, r.customer_id, r.status, r.discount_amount, r.expires_at;
END;
$$;

-- fg_merge_strict: as in V14, with the budget. A batch whose new uses' discounts fit the
-- budget left together is taken whole (each of them fits after the ones before, as in the
-- loop); one that does not depends on its order (which refusal gives back room to whom), and
-- goes to the loop.
CREATE OR REPLACE FUNCTION fg_merge_strict(p_codes TEXT[], p_orders TEXT[], p_customers BIGINT[],
                                p_statuses SMALLINT[], p_order_amounts BIGINT[],
                                p_discounts BIGINT[], p_reserved_at TIMESTAMPTZ[],
                                p_expires_at TIMESTAMPTZ[], p_reasons TEXT[],
                                p_now TIMESTAMPTZ[], p_revoke BOOLEAN[])
RETURNS TABLE(idx INT, outcome TEXT, customer_id BIGINT, status SMALLINT,
              discount_amount BIGINT, expires_at TIMESTAMPTZ, flash_sale BOOLEAN,
              error_code TEXT, error_message TEXT)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    n          INT := COALESCE(array_length(p_codes, 1), 0);
    changes    fg_change[];
    want       RECORD;
    free       RECORD;
    got        BIGINT;
    pool_code  TEXT[] := '{}';
    pool_slot  SMALLINT[] := '{}';
    pool_room  BIGINT[] := '{}';
    taken      SMALLINT[];
    rooms      BIGINT[];
    expected   INT;
    written    INT;
    b_codes    TEXT[];
    b_deltas   BIGINT[];
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    -- Every change of a batch carries one key; a key twice means the changes depend on each
    -- other's order.
    IF (SELECT count(DISTINCT (k.code, k.order_id)) FROM unnest(p_codes, p_orders) k(code, order_id)) <> n THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'an order twice in the batch';
    END IF;

    -- The rows that exist, locked in key order, so that two batches never wait on each other
    -- in a circle; then the customers' counters the batch moves, in key order too.
    PERFORM 1 FROM redemption r
      JOIN unnest(p_codes, p_orders) k(code, order_id)
        ON r.voucher_code = k.code AND r.order_id = k.order_id
     ORDER BY r.voucher_code, r.order_id
       FOR UPDATE OF r;
    PERFORM 1 FROM voucher_customer c
      JOIN (SELECT DISTINCT k.code, COALESCE(k.customer, r.customer_id) AS customer
              FROM unnest(p_codes, p_orders, p_customers) k(code, order_id, customer)
              LEFT JOIN redemption r ON r.voucher_code = k.code AND r.order_id = k.order_id) k
        ON c.voucher_code = k.code AND c.customer_id = k.customer
     ORDER BY c.voucher_code, c.customer_id
       FOR UPDATE OF c;

    SELECT array_agg(q.ch ORDER BY (q.ch).idx) INTO changes
      FROM (SELECT ROW(
               i.idx::INT, i.code, i.order_id, i.customer, i.status, i.order_amount, i.discount,
               i.reserved_at, i.expires_at, i.reason, i.now, i.revoke,
               CASE WHEN v.code IS NULL OR i.status NOT IN (1, 2, 3)
                         OR (i.customer IS NOT NULL
                             AND i.expires_at > i.reserved_at + make_interval(secs => v.reservation_ttl_seconds))
                         THEN 'raise'
                    WHEN r.order_id IS NULL AND i.customer IS NULL THEN 'not_found'
                    WHEN r.order_id IS NULL AND i.status = 3 THEN 'new_released'
                    WHEN r.order_id IS NULL THEN 'new_use'
                    WHEN i.customer IS NOT NULL AND r.customer_id <> i.customer THEN 'conflict'
                    WHEN r.status >= i.status THEN 'unchanged'
                    WHEN i.status = 2 THEN 'confirm'
                    ELSE 'release' END,
               r.status, r.customer_id, r.discount_amount, r.expires_at, r.slot, v.flash_sale,
               -- This customer's k-th new use in the batch passes the limit while
               -- active + k <= limit (an earlier one refused for want of room leaves no room
               -- for a later one either).
               COALESCE(c.active, 0)
                 + count(*) FILTER (WHERE r.order_id IS NULL AND i.status IN (1, 2))
                     OVER (PARTITION BY i.code, i.customer ORDER BY i.idx)
                 <= v.per_user_limit,
               NULL)::fg_change AS ch
      FROM unnest(p_codes, p_orders, p_customers, p_statuses, p_order_amounts, p_discounts,
                  p_reserved_at, p_expires_at, p_reasons, p_now, p_revoke)
             WITH ORDINALITY AS i(code, order_id, customer, status, order_amount, discount,
                                  reserved_at, expires_at, reason, now, revoke, idx)
      LEFT JOIN voucher v ON v.code = i.code
      LEFT JOIN redemption r ON r.voucher_code = i.code AND r.order_id = i.order_id
      LEFT JOIN voucher_customer c ON c.voucher_code = i.code AND c.customer_id = i.customer) q;

    IF EXISTS (SELECT 1 FROM unnest(changes) c WHERE c.kind = 'raise') THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'a change fg_merge raises for';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(changes) c GROUP BY c.code
                HAVING bool_or(c.kind = 'new_use') AND bool_or(c.kind = 'release')) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'new and given-back uses of one voucher';
    END IF;

    -- Room for each voucher's candidates: slots locked one at a time from a start the batch's
    -- first order chooses, skipping those other batches hold, until their room covers the
    -- candidates. When it does not, every slot is locked in order (waiting as needed), and the
    -- room they hold is all there is: the first candidates take it.
    FOR want IN SELECT c.code, count(*) AS wanted, min(c.order_id) AS first_order,
                    x.counter_slots AS k
               FROM unnest(changes) c JOIN voucher x ON x.code = c.code
              WHERE c.kind = 'new_use' AND c.candidate
              GROUP BY c.code, x.counter_slots
              ORDER BY c.code LOOP
        taken := '{}';
        rooms := '{}';
        got := 0;
        LOOP
            SELECT x.slot, x.cap - x.used AS room INTO free
              FROM voucher_slot x
             WHERE x.voucher_code = want.code AND x.used < x.cap AND x.slot <> ALL (taken)
             ORDER BY (x.slot - abs(hashtext(want.first_order) % want.k) + want.k) % want.k
             LIMIT 1
               FOR UPDATE SKIP LOCKED;
            EXIT WHEN NOT FOUND;
            taken := taken || free.slot;
            rooms := rooms || free.room;
            got := got + free.room;
            EXIT WHEN got >= want.wanted;
        END LOOP;
        IF got < want.wanted THEN
            SELECT COALESCE(array_agg(l.slot ORDER BY l.slot), '{}'),
                   COALESCE(array_agg(l.cap - l.used ORDER BY l.slot), '{}')
              INTO taken, rooms
              FROM (SELECT x.slot, x.cap, x.used FROM voucher_slot x
                     WHERE x.voucher_code = want.code
                     ORDER BY x.slot
                       FOR UPDATE) l
             WHERE l.used < l.cap;
        END IF;
        pool_code := pool_code || array_fill(want.code, ARRAY[cardinality(taken)]);
        pool_slot := pool_slot || taken;
        pool_room := pool_room || rooms;
    END LOOP;

    -- The candidates, in arrival order, fill the pool's slots in turn.
    WITH pool AS (
        SELECT p.code, p.slot,
               sum(p.room) OVER (PARTITION BY p.code ORDER BY p.ord) - p.room AS before,
               sum(p.room) OVER (PARTITION BY p.code ORDER BY p.ord) AS upto
          FROM unnest(pool_code, pool_slot, pool_room) WITH ORDINALITY p(code, slot, room, ord)),
    wins AS (
        SELECT c.idx, row_number() OVER (PARTITION BY c.code ORDER BY c.idx) AS nth, c.code
          FROM unnest(changes) c
         WHERE c.kind = 'new_use' AND c.candidate)
    SELECT array_agg(ROW(c.idx, c.code, c.order_id, c.customer_id, c.status, c.order_amount,
                         c.discount, c.reserved_at, c.expires_at, c.reason, c.now, c.revoke,
                         c.kind, c.old_status, c.row_customer, c.row_discount, c.row_expires,
                         c.row_slot, c.flash_sale, c.candidate, p.slot)::fg_change ORDER BY c.idx)
      INTO changes
      FROM unnest(changes) c
      LEFT JOIN wins w ON w.idx = c.idx
      LEFT JOIN pool p ON p.code = w.code AND w.nth > p.before AND w.nth <= p.upto;

    -- A refused new use without p_revoke: fg_merge raises for it.
    IF EXISTS (SELECT 1 FROM unnest(changes) c
                WHERE c.kind = 'new_use' AND c.slot IS NULL AND NOT c.revoke) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = 'a new use refused';
    END IF;

    -- The writes. New rows: winners with their slot, refusals stored REVOKED, releases that
    -- came first. A key another transaction claimed since the look above raises.
    SELECT count(*) INTO expected FROM unnest(changes) c WHERE c.kind IN ('new_use', 'new_released');
    IF expected > 0 THEN
        INSERT INTO redemption (voucher_code, order_id, customer_id, status, order_amount,
                                discount_amount, reserved_at, expires_at, confirmed_at,
                                released_at, release_reason, slot)
        SELECT c.code, c.order_id, c.customer_id,
               CASE WHEN c.kind = 'new_use' AND c.slot IS NULL THEN 3 ELSE c.status END,
               c.order_amount, c.discount, c.reserved_at, c.expires_at,
               CASE WHEN c.status = 2 THEN c.now END,
               CASE WHEN c.status = 3 OR c.slot IS NULL AND c.kind = 'new_use' THEN c.now END,
               CASE WHEN c.kind = 'new_released' THEN COALESCE(c.reason, 'CANCELLED')
                    WHEN c.slot IS NULL THEN 'REVOKED' END,
               c.slot
          FROM unnest(changes) c
         WHERE c.kind IN ('new_use', 'new_released')
         ORDER BY c.code, c.order_id
        ON CONFLICT ON CONSTRAINT redemption_pkey DO NOTHING;
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written <> expected THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'an order claimed meanwhile';
        END IF;
    END IF;

    UPDATE redemption x
       SET status         = c.status,
           confirmed_at   = CASE WHEN c.status = 2 THEN c.now ELSE x.confirmed_at END,
           released_at    = CASE WHEN c.status = 3 THEN c.now ELSE x.released_at END,
           release_reason = CASE WHEN c.status = 3 THEN COALESCE(c.reason, 'CANCELLED') END
      FROM unnest(changes) c
     WHERE c.kind IN ('confirm', 'release')
       AND x.voucher_code = c.code AND x.order_id = c.order_id;

    -- Customers: each winner's +1, each given-back use's -1, summed per customer. The upsert
    -- checks the limit again: a counter a concurrent transaction created meanwhile raises.
    SELECT count(DISTINCT (c.code, c.customer_id)) INTO expected
      FROM unnest(changes) c WHERE c.kind = 'new_use' AND c.slot IS NOT NULL;
    IF expected > 0 THEN
        INSERT INTO voucher_customer AS vc (voucher_code, customer_id, active)
        SELECT c.code, c.customer_id, count(*)
          FROM unnest(changes) c
         WHERE c.kind = 'new_use' AND c.slot IS NOT NULL
         GROUP BY c.code, c.customer_id
         ORDER BY c.code, c.customer_id
        ON CONFLICT (voucher_code, customer_id) DO UPDATE SET active = vc.active + EXCLUDED.active
         WHERE vc.active + EXCLUDED.active
               <= (SELECT x.per_user_limit FROM voucher x WHERE x.code = vc.voucher_code);
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written <> expected THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'a customer counter moved meanwhile';
        END IF;
    END IF;
    UPDATE voucher_customer vc SET active = vc.active - d.n
      FROM (SELECT c.code, c.row_customer, count(*) AS n
              FROM unnest(changes) c WHERE c.kind = 'release' AND c.old_status IN (1, 2)
             GROUP BY c.code, c.row_customer) d
     WHERE vc.voucher_code = d.code AND vc.customer_id = d.row_customer;

    -- Slots: one UPDATE, each touched slot moved once by its sums. Those not yet locked (a
    -- confirm's, a release's, slot 0 for revocations) are locked first, in order.
    PERFORM 1 FROM voucher_slot x
      JOIN (SELECT DISTINCT c.code, CASE WHEN c.kind = 'new_use' AND c.slot IS NULL THEN 0::SMALLINT
                                         ELSE c.row_slot END AS slot
              FROM unnest(changes) c
             WHERE c.kind IN ('confirm', 'release') OR c.kind = 'new_use' AND c.slot IS NULL) d
        ON x.voucher_code = d.code AND x.slot = d.slot
     ORDER BY x.voucher_code, x.slot
       FOR UPDATE OF x;
    UPDATE voucher_slot x
       SET used = x.used + d.used, confirmed = x.confirmed + d.confirmed,
           revoked = x.revoked + d.revoked
      FROM (SELECT m.code, m.slot, sum(m.used) AS used, sum(m.confirmed) AS confirmed,
                   sum(m.revoked) AS revoked
              FROM (SELECT c.code,
                           CASE WHEN c.kind = 'new_use' THEN COALESCE(c.slot, 0::SMALLINT)
                                ELSE c.row_slot END AS slot,
                           CASE WHEN c.kind = 'new_use' AND c.slot IS NOT NULL THEN 1
                                WHEN c.kind = 'release' THEN -1 ELSE 0 END AS used,
                           CASE WHEN c.kind = 'new_use' AND c.slot IS NOT NULL AND c.status = 2 THEN 1
                                WHEN c.kind = 'confirm' THEN 1
                                WHEN c.kind = 'release' AND c.old_status = 2 THEN -1
                                ELSE 0 END AS confirmed,
                           CASE WHEN c.kind = 'new_use' AND c.slot IS NULL THEN 1 ELSE 0 END AS revoked
                      FROM unnest(changes) c
                     WHERE c.kind IN ('new_use', 'confirm', 'release')) m
             GROUP BY m.code, m.slot) d
     WHERE x.voucher_code = d.code AND x.slot = d.slot;

    -- Budgets, last (lock order): each budgeted voucher moved once, by its winners' discounts
    -- or by its given-back uses' (never both: see above). Winners that do not fit together
    -- depend on their order: the loop decides them.
    SELECT array_agg(d.code ORDER BY d.code), array_agg(d.delta ORDER BY d.code)
      INTO b_codes, b_deltas
      FROM (SELECT c.code,
                   sum(CASE WHEN c.kind = 'new_use' THEN c.discount ELSE -c.row_discount END) AS delta
              FROM unnest(changes) c
              JOIN voucher_budget b ON b.voucher_code = c.code
             WHERE c.kind = 'new_use' AND c.slot IS NOT NULL
                OR c.kind = 'release' AND c.old_status IN (1, 2)
             GROUP BY c.code) d;
    IF b_codes IS NOT NULL THEN
        PERFORM 1 FROM voucher_budget b WHERE b.voucher_code = ANY (b_codes)
         ORDER BY b.voucher_code
           FOR UPDATE;
        IF EXISTS (SELECT 1 FROM voucher_budget b
                     JOIN unnest(b_codes, b_deltas) d(code, delta) ON b.voucher_code = d.code
                    WHERE b.amount IS NOT NULL AND b.used + d.delta > b.amount) THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'new uses past the budget together';
        END IF;
        UPDATE voucher_budget b SET used = b.used + d.delta
          FROM unnest(b_codes, b_deltas) d(code, delta)
         WHERE b.voucher_code = d.code;
    END IF;

    RETURN QUERY
    SELECT c.idx,
           CASE c.kind WHEN 'not_found' THEN 'NOT_FOUND'
                       WHEN 'conflict' THEN 'ORDER_CONFLICT'
                       WHEN 'unchanged' THEN 'UNCHANGED'
                       WHEN 'new_use' THEN CASE WHEN c.slot IS NULL THEN 'REVOKED' ELSE 'APPLIED' END
                       ELSE 'APPLIED' END,
           CASE WHEN c.kind = 'not_found' THEN NULL
                WHEN c.kind IN ('new_use', 'new_released') THEN c.customer_id
                ELSE c.row_customer END,
           CASE WHEN c.kind = 'not_found' THEN NULL
                WHEN c.kind IN ('conflict', 'unchanged') THEN c.old_status
                WHEN c.kind = 'new_use' AND c.slot IS NULL THEN 3::SMALLINT
                ELSE c.status END,
           CASE WHEN c.kind = 'not_found' THEN NULL
                WHEN c.kind IN ('new_use', 'new_released') THEN c.discount
                ELSE c.row_discount END,
           CASE WHEN c.kind = 'not_found' THEN NULL
                WHEN c.kind IN ('new_use', 'new_released') THEN c.expires_at
                ELSE c.row_expires END,
           c.flash_sale, NULL::TEXT, NULL::TEXT
      FROM unnest(changes) c
     ORDER BY c.idx;
END;
$$;

-- fg_reserve_strict: as in V14, with fg_validate's BUDGET_EXHAUSTED (from the batch's one
-- snapshot; eligible requests that do not fit together raise in fg_merge_strict).
CREATE OR REPLACE FUNCTION fg_reserve_strict(p_codes TEXT[], p_orders TEXT[], p_customers BIGINT[],
                                  p_order_amounts BIGINT[], p_now TIMESTAMPTZ[])
RETURNS TABLE(idx INT, outcome TEXT, customer_id BIGINT, status SMALLINT,
              discount_amount BIGINT, expires_at TIMESTAMPTZ, error_code TEXT,
              error_message TEXT)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    a_idx       INT[];
    a_outcome   TEXT[];
    a_customer  BIGINT[];
    a_status    SMALLINT[];
    a_discount  BIGINT[];
    a_expires   TIMESTAMPTZ[];
    e_idx       INT[];
    e_codes     TEXT[];
    e_orders    TEXT[];
    e_customers BIGINT[];
    e_amounts   BIGINT[];
    e_discounts BIGINT[];
    e_now       TIMESTAMPTZ[];
    e_expires   TIMESTAMPTZ[];
BEGIN
    -- A retry in the batch of a request before it is answered by that request's row.
    IF (SELECT count(DISTINCT (k.code, k.order_id)) FROM unnest(p_codes, p_orders) k(code, order_id))
       <> cardinality(p_codes) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'an order twice in the batch';
    END IF;
    SELECT array_agg(q.idx ORDER BY q.idx), array_agg(q.outcome ORDER BY q.idx),
           array_agg(q.row_customer ORDER BY q.idx), array_agg(q.row_status ORDER BY q.idx),
           array_agg(q.row_discount ORDER BY q.idx), array_agg(q.row_expires ORDER BY q.idx),
           array_agg(q.idx ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE'),
           array_agg(q.code ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE'),
           array_agg(q.order_id ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE'),
           array_agg(q.customer ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE'),
           array_agg(q.order_amount ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE'),
           array_agg(q.discount ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE'),
           array_agg(q.now ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE'),
           array_agg(q.expires ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE')
      INTO a_idx, a_outcome, a_customer, a_status, a_discount, a_expires,
           e_idx, e_codes, e_orders, e_customers, e_amounts, e_discounts, e_now, e_expires
      FROM (SELECT i.idx::INT AS idx, i.code, i.order_id, i.customer, i.order_amount, i.now,
                   r.customer_id AS row_customer, r.status AS row_status,
                   r.discount_amount AS row_discount, r.expires_at AS row_expires,
                   CASE WHEN r.order_id IS NOT NULL THEN
                            CASE WHEN r.customer_id <> i.customer THEN 'ORDER_CONFLICT'
                                 WHEN r.status = 3 THEN 'RESERVATION_RELEASED'
                                 ELSE 'REPLAY' END
                        WHEN v.code IS NULL THEN 'VOUCHER_NOT_FOUND'
                        WHEN NOT v.active THEN 'INACTIVE'
                        WHEN i.now < v.starts_at THEN 'NOT_STARTED'
                        WHEN i.now >= v.ends_at THEN 'EXPIRED'
                        WHEN i.order_amount < v.min_order_amount THEN 'MIN_ORDER_AMOUNT'
                        WHEN COALESCE(c.active, 0) >= v.per_user_limit THEN 'ALREADY_USED'
                        WHEN NOT EXISTS (SELECT 1 FROM voucher_slot vs
                                          WHERE vs.voucher_code = v.code AND vs.used < vs.cap)
                             THEN 'OUT_OF_STOCK'
                        WHEN b.amount - b.used
                             < fg_discount(i.order_amount, v.discount_amount, v.discount_percent,
                                           v.max_discount_amount)
                             THEN 'BUDGET_EXHAUSTED'
                        ELSE 'ELIGIBLE' END AS outcome,
                   fg_discount(i.order_amount, v.discount_amount, v.discount_percent,
                               v.max_discount_amount) AS discount,
                   i.now + make_interval(secs => v.reservation_ttl_seconds) AS expires
              FROM unnest(p_codes, p_orders, p_customers, p_order_amounts, p_now)
                     WITH ORDINALITY AS i(code, order_id, customer, order_amount, now, idx)
              LEFT JOIN redemption r ON r.voucher_code = i.code AND r.order_id = i.order_id
              LEFT JOIN voucher v ON v.code = i.code
              LEFT JOIN voucher_customer c
                     ON c.voucher_code = i.code AND c.customer_id = i.customer
              LEFT JOIN voucher_budget b ON b.voucher_code = i.code) q;

    RETURN QUERY
    WITH m AS (
        SELECT e.idx AS asked, s.*
          FROM fg_merge_strict(e_codes, e_orders, e_customers,
                               array_fill(1::SMALLINT, ARRAY[cardinality(e_codes)]),
                               e_amounts, e_discounts, e_now, e_expires,
                               array_fill(NULL::TEXT, ARRAY[cardinality(e_codes)]),
                               e_now, array_fill(false, ARRAY[cardinality(e_codes)])) s
          JOIN unnest(e_idx) WITH ORDINALITY e(idx, pos) ON s.idx = e.pos)
    SELECT a.idx,
           CASE WHEN m.asked IS NULL THEN a.outcome
                WHEN m.outcome = 'APPLIED' THEN 'RESERVED'
                WHEN m.outcome = 'UNCHANGED' AND m.status = 3 THEN 'RESERVATION_RELEASED'
                WHEN m.outcome = 'UNCHANGED' THEN 'REPLAY'
                ELSE m.outcome END,
           CASE WHEN m.asked IS NULL THEN a.customer ELSE m.customer_id END,
           CASE WHEN m.asked IS NULL THEN a.status ELSE m.status END,
           CASE WHEN m.asked IS NULL THEN a.discount ELSE m.discount_amount END,
           CASE WHEN m.asked IS NULL THEN a.expires ELSE m.expires_at END,
           NULL::TEXT, NULL::TEXT
      FROM unnest(a_idx, a_outcome, a_customer, a_status, a_discount, a_expires)
             AS a(idx, outcome, customer, status, discount, expires)
      LEFT JOIN m ON m.asked = a.idx
     ORDER BY a.idx;
END;
$$;

-- CREATE OR REPLACE drops a function's settings: V14's plans without hash joins, merge joins or
-- sequential scans, again.
ALTER FUNCTION fg_merge_strict SET enable_hashjoin = off;
ALTER FUNCTION fg_merge_strict SET enable_mergejoin = off;
ALTER FUNCTION fg_merge_strict SET enable_seqscan = off;
ALTER FUNCTION fg_reserve_strict SET enable_hashjoin = off;
ALTER FUNCTION fg_reserve_strict SET enable_mergejoin = off;
ALTER FUNCTION fg_reserve_strict SET enable_seqscan = off;

-- fg_patch_voucher: as in V15, with the budget (NULL: none). Lowering it below the discounts
-- held is refused, BUDGET_BELOW_USED, and nothing is written. A voucher's first budget counts
-- the discounts of its active uses under every slot's lock: a use taken meanwhile waits for
-- that lock, then finds the budget row (fg_merge reads it after taking its slot).
DROP FUNCTION fg_patch_voucher(TEXT, BIGINT, BIGINT, SMALLINT, BIGINT, BIGINT, INT, INT,
                               TIMESTAMPTZ, TIMESTAMPTZ, BOOLEAN, SMALLINT);
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
    p_counter_slots     SMALLINT,
    p_budget_amount     BIGINT
) RETURNS TABLE (outcome TEXT, version BIGINT)
LANGUAGE plpgsql AS $$
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
