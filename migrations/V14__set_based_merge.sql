-- Set-based batch writes. A batch of status changes (mode A's winners, the mode-B consumer's
-- events, the sweeper's expiries) and a batch of standard reserves are written with a fixed
-- handful of statements, whatever the batch's size, in place of a plpgsql fg_merge call (about
-- ten statements) per change: the row claims in one INSERT, the row changes in one UPDATE, the
-- customer counters in one upsert, the slots in one UPDATE per batch (each touched slot moved
-- once by the sum of its winners).
--
-- The outcomes are exactly those of running fg_merge on each change in turn, in a savepoint of
-- its own (fg_merge_batch with p_isolate): the set-based path takes the batches whose changes
-- do not depend on one another's order, and hands every other batch to that loop whole:
--   * one order twice in the batch (a retry racing its first try);
--   * one voucher with both a new use and a use given back (the count's order matters);
--   * a new use that is refused without p_revoke (fg_merge raises FG409 for it);
--   * anything Postgres raises: an unknown voucher, an expiry past the TTL, a bad value, a
--     deadlock, an order claimed by another transaction meanwhile.
-- The service calls fg_merge_strict and fg_reserve_strict, and when they raise (nothing was
-- written) runs the loop in a second round trip; fg_merge_set and fg_reserve_set do the same
-- inside Postgres for callers in SQL (fg_expire), at the price of a subtransaction per batch.
-- tests/it/set_merge.rs runs random batches through both and compares every answer, row and
-- counter.

-- One change of a batch, as the set-based path classifies it.
CREATE TYPE fg_change AS (
    idx          INT,
    code         TEXT,
    order_id     TEXT,
    customer_id  BIGINT,       -- given (NULL: the caller knows only the key)
    status       SMALLINT,     -- incoming
    order_amount BIGINT,
    discount     BIGINT,
    reserved_at  TIMESTAMPTZ,
    expires_at   TIMESTAMPTZ,
    reason       TEXT,
    now          TIMESTAMPTZ,
    revoke       BOOLEAN,
    -- not_found | conflict | unchanged | confirm | release | new_released | new_use
    kind         TEXT,
    old_status   SMALLINT,     -- the stored row's, when there is one
    row_customer BIGINT,
    row_discount BIGINT,
    row_expires  TIMESTAMPTZ,
    row_slot     SMALLINT,
    flash_sale   BOOLEAN,
    -- new_use: may it pass its customer's limit, counted in arrival order (a + rank <= limit)
    candidate    BOOLEAN,
    -- new_use: the slot it won (NULL: refused)
    slot         SMALLINT
);

-- The set-based path. Raises when the batch is not one it takes (see above); the caller then
-- runs the loop instead (fg_merge_set does both).
CREATE FUNCTION fg_merge_strict(p_codes TEXT[], p_orders TEXT[], p_customers BIGINT[],
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

-- A batch of status changes: the set-based path, or when it does not take the batch, the loop
-- of fg_merge calls each in a savepoint of its own. The same answers either way: one row per
-- change, in order, with what Postgres raised for a change that failed alone.
CREATE FUNCTION fg_merge_set(p_codes TEXT[], p_orders TEXT[], p_customers BIGINT[],
                             p_statuses SMALLINT[], p_order_amounts BIGINT[],
                             p_discounts BIGINT[], p_reserved_at TIMESTAMPTZ[],
                             p_expires_at TIMESTAMPTZ[], p_reasons TEXT[],
                             p_now TIMESTAMPTZ[], p_revoke BOOLEAN[])
RETURNS TABLE(idx INT, outcome TEXT, customer_id BIGINT, status SMALLINT,
              discount_amount BIGINT, expires_at TIMESTAMPTZ, flash_sale BOOLEAN,
              error_code TEXT, error_message TEXT)
LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        RETURN QUERY SELECT * FROM fg_merge_strict(p_codes, p_orders, p_customers, p_statuses,
                                                   p_order_amounts, p_discounts, p_reserved_at,
                                                   p_expires_at, p_reasons, p_now, p_revoke);
        RETURN;
    EXCEPTION WHEN OTHERS THEN
        -- Everything the set-based path wrote is rolled back with its savepoint.
        NULL;
    END;
    RETURN QUERY SELECT * FROM fg_merge_batch(p_codes, p_orders, p_customers, p_statuses,
                                              p_order_amounts, p_discounts, p_reserved_at,
                                              p_expires_at, p_reasons, p_now, p_revoke, true);
END;
$$;

-- Standard reserves, set-based: every request's stored row (a retry), else its validation
-- (fg_validate's checks, in its order), read in one statement and so from one snapshot; the
-- eligible ones written by fg_merge_strict. Raises where fg_merge_strict does, and where a
-- request's validation would have seen an earlier one's use (the second use of one customer in
-- the batch, a batch that sells the voucher out): fg_reserve_set then runs the loop.
CREATE FUNCTION fg_reserve_strict(p_codes TEXT[], p_orders TEXT[], p_customers BIGINT[],
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
                        ELSE 'ELIGIBLE' END AS outcome,
                   fg_discount(i.order_amount, v.discount_amount, v.discount_percent,
                               v.max_discount_amount) AS discount,
                   i.now + make_interval(secs => v.reservation_ttl_seconds) AS expires
              FROM unnest(p_codes, p_orders, p_customers, p_order_amounts, p_now)
                     WITH ORDINALITY AS i(code, order_id, customer, order_amount, now, idx)
              LEFT JOIN redemption r ON r.voucher_code = i.code AND r.order_id = i.order_id
              LEFT JOIN voucher v ON v.code = i.code
              LEFT JOIN voucher_customer c
                     ON c.voucher_code = i.code AND c.customer_id = i.customer) q;

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

-- A batch of standard reserves: the set-based path, or the loop of fg_reserve calls each in a
-- savepoint of its own (fg_reserve_batch). The same answers either way.
CREATE FUNCTION fg_reserve_set(p_codes TEXT[], p_orders TEXT[], p_customers BIGINT[],
                               p_order_amounts BIGINT[], p_now TIMESTAMPTZ[])
RETURNS TABLE(idx INT, outcome TEXT, customer_id BIGINT, status SMALLINT,
              discount_amount BIGINT, expires_at TIMESTAMPTZ, error_code TEXT,
              error_message TEXT)
LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        RETURN QUERY SELECT * FROM fg_reserve_strict(p_codes, p_orders, p_customers,
                                                     p_order_amounts, p_now);
        RETURN;
    EXCEPTION WHEN OTHERS THEN
        NULL;
    END;
    RETURN QUERY SELECT * FROM fg_reserve_batch(p_codes, p_orders, p_customers,
                                                p_order_amounts, p_now, true);
END;
$$;

-- fg_expire: the sweeper's expiry batch, released by the set-based path (the locks it takes up
-- front, customer rows then slots in key order, as before).
CREATE OR REPLACE FUNCTION fg_expire(p_now TIMESTAMPTZ, p_limit INT)
RETURNS TABLE (voucher_code TEXT, order_id TEXT, customer_id BIGINT, flash_sale BOOLEAN)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    codes      TEXT[];
    orders     TEXT[];
    customers  BIGINT[];
    slots      SMALLINT[];
    n          INT;
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

    n := array_length(codes, 1);
    RETURN QUERY
    SELECT codes[m.idx], orders[m.idx], customers[m.idx], m.flash_sale
      FROM fg_merge_set(codes, orders, array_fill(NULL::BIGINT, ARRAY[n]),
                        array_fill(3::SMALLINT, ARRAY[n]), array_fill(NULL::BIGINT, ARRAY[n]),
                        array_fill(NULL::BIGINT, ARRAY[n]), array_fill(NULL::TIMESTAMPTZ, ARRAY[n]),
                        array_fill(NULL::TIMESTAMPTZ, ARRAY[n]), array_fill('EXPIRED'::TEXT, ARRAY[n]),
                        array_fill(p_now, ARRAY[n]), array_fill(false, ARRAY[n])) m
     WHERE m.outcome = 'APPLIED'
     ORDER BY m.idx;
END;
$$;

-- Plans for the set-based functions' joins are cached per connection, and the first are made
-- when the tables are small: a hash join over a sequential scan of redemption looks cheapest
-- then, and would cost more with every row the sale adds. Each batch touches a few dozen keys,
-- so index lookups are always right: the functions plan without hash joins, merge joins or
-- sequential scans.
ALTER FUNCTION fg_merge_strict SET enable_hashjoin = off;
ALTER FUNCTION fg_merge_strict SET enable_mergejoin = off;
ALTER FUNCTION fg_merge_strict SET enable_seqscan = off;
ALTER FUNCTION fg_reserve_strict SET enable_hashjoin = off;
ALTER FUNCTION fg_reserve_strict SET enable_mergejoin = off;
ALTER FUNCTION fg_reserve_strict SET enable_seqscan = off;
