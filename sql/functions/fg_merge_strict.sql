-- fg_merge_strict: a batch of status changes written set-based, a fixed handful of statements
-- whatever its size: rows locked in key order, each change classified, slots' room taken in
-- bulk, then one statement per table, the campaigns' counters last. It answers and stores
-- exactly what fg_merge on each change in turn would, and raises (FG422 or FG409, nothing
-- written) for every batch where the order of its changes could matter; the caller then runs
-- the loop (docs/ARCHITECTURE.md, "Set-based batch writes").

CREATE OR REPLACE FUNCTION fg_merge_strict(
    p_codes text[],
    p_orders text[],
    p_customers bigint[],
    p_statuses smallint[],
    p_order_amounts bigint[],
    p_discounts bigint[],
    p_reserved_at timestamp with time zone[],
    p_expires_at timestamp with time zone[],
    p_reasons text[],
    p_now timestamp with time zone[],
    p_revoke boolean[]
)
RETURNS TABLE(
    idx integer,
    outcome text,
    customer_id bigint,
    status smallint,
    discount_amount bigint,
    expires_at timestamp with time zone,
    flash_sale boolean,
    error_code text,
    error_message text
)
LANGUAGE plpgsql
SET enable_hashjoin TO 'off'
SET enable_mergejoin TO 'off'
SET enable_seqscan TO 'off'
AS $$
#variable_conflict use_column
DECLARE
    n          INT := COALESCE(array_length(p_codes, 1), 0);
    changes    fg_change[];
    want       RECORD;
    pool_code  TEXT[] := '{}';
    pool_slot  SMALLINT[] := '{}';
    pool_room  BIGINT[] := '{}';
    taken      SMALLINT[];
    rooms      BIGINT[];
    expected   INT;
    written    INT;
    b_codes    TEXT[];
    b_deltas   BIGINT[];
    g_camp     BIGINT[];
    g_customer BIGINT[];
    g_new      BOOLEAN[];
    g_money    BIGINT[];
    k_ids      BIGINT[];
    k_uses     BIGINT[];
    k_money    BIGINT[];
    k_back     BIGINT[];
    k_refund   BIGINT[];
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

    -- Room for each voucher's candidates (fg_slot_room): when there is not enough, the room
    -- there is goes to the first candidates.
    FOR want IN SELECT c.code, count(*) AS wanted, min(c.order_id) AS first_order,
                    x.counter_slots AS k
               FROM unnest(changes) c JOIN voucher x ON x.code = c.code
              WHERE c.kind = 'new_use' AND c.candidate
              GROUP BY c.code, x.counter_slots
              ORDER BY c.code LOOP
        SELECT COALESCE(array_agg(r.slot ORDER BY r.ord), '{}'),
               COALESCE(array_agg(r.room ORDER BY r.ord), '{}')
          INTO taken, rooms
          FROM fg_slot_room(want.code, want.wanted, want.first_order, want.k)
                 WITH ORDINALITY r(slot, room, ord);
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
        PERFORM fg_move_budgets(b_codes, b_deltas);
    END IF;

    -- Campaigns' counters, last (lock order: code budget -> campaign customer -> campaign
    -- counter). The uses that move: new uses that won a slot, and given-back uses (a release or
    -- an expiry of a RESERVED or CONFIRMED row), each of a campaign's code. Each code is read by
    -- its key in a subquery the campaign test cannot reach (OFFSET 0): as a join, the planner
    -- picked the partial index of campaigns' codes and walked all of it for each change.
    SELECT array_agg(v.campaign_id ORDER BY c.idx),
           array_agg(CASE WHEN c.kind = 'new_use' THEN c.customer_id ELSE c.row_customer END
                     ORDER BY c.idx),
           array_agg(c.kind = 'new_use' ORDER BY c.idx),
           array_agg(CASE WHEN c.kind = 'new_use' THEN c.discount ELSE c.row_discount END
                     ORDER BY c.idx)
      INTO g_camp, g_customer, g_new, g_money
      FROM unnest(changes) c
     CROSS JOIN LATERAL (SELECT x.campaign_id FROM voucher x WHERE x.code = c.code OFFSET 0) v
     WHERE v.campaign_id IS NOT NULL
       AND (c.kind = 'new_use' AND c.slot IS NOT NULL
            OR c.kind = 'release' AND c.old_status IN (1, 2));
    IF g_camp IS NOT NULL THEN
        -- Each customer's counter over the campaign, those that exist locked in key order. The
        -- new uses must all fit under the per-user limit as if none were given back: then they
        -- fit in any order of the batch, and the loop would take them all too. Otherwise which
        -- of them the campaign refuses depends on the order: the loop decides.
        PERFORM 1 FROM campaign_customer cc
          JOIN (SELECT DISTINCT g.camp, g.customer
                  FROM unnest(g_camp, g_customer) g(camp, customer)) d
            ON cc.campaign_id = d.camp AND cc.customer_id = d.customer
         ORDER BY cc.campaign_id, cc.customer_id
           FOR UPDATE OF cc;
        IF EXISTS (SELECT 1
                     FROM (SELECT g.camp, g.customer, count(*) AS n
                             FROM unnest(g_camp, g_customer, g_new) g(camp, customer, new)
                            WHERE g.new
                            GROUP BY g.camp, g.customer) d
                     JOIN campaign p ON p.id = d.camp
                    WHERE COALESCE((SELECT cc.active FROM campaign_customer cc
                                     WHERE cc.campaign_id = d.camp
                                       AND cc.customer_id = d.customer), 0) + d.n
                          > p.per_user_limit) THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422',
                MESSAGE = 'new uses past a campaign''s per-user limit together';
        END IF;
        -- The new uses' +1s. The upsert checks the limit again: a counter a concurrent
        -- transaction created meanwhile raises.
        SELECT count(DISTINCT (g.camp, g.customer)) INTO expected
          FROM unnest(g_camp, g_customer, g_new) g(camp, customer, new) WHERE g.new;
        IF expected > 0 THEN
            INSERT INTO campaign_customer AS cc (campaign_id, customer_id, active)
            SELECT g.camp, g.customer, count(*)
              FROM unnest(g_camp, g_customer, g_new) g(camp, customer, new)
             WHERE g.new
             GROUP BY g.camp, g.customer
             ORDER BY g.camp, g.customer
            ON CONFLICT (campaign_id, customer_id) DO UPDATE SET active = cc.active + EXCLUDED.active
             WHERE cc.active + EXCLUDED.active
                   <= COALESCE((SELECT p.per_user_limit FROM campaign p WHERE p.id = cc.campaign_id),
                               cc.active + EXCLUDED.active);
            GET DIAGNOSTICS written = ROW_COUNT;
            IF written <> expected THEN
                RAISE EXCEPTION USING ERRCODE = 'FG422',
                    MESSAGE = 'a campaign''s customer counter moved meanwhile';
            END IF;
        END IF;
        -- The given-back uses' -1s.
        UPDATE campaign_customer cc SET active = cc.active - d.n
          FROM (SELECT g.camp, g.customer, count(*) AS n
                  FROM unnest(g_camp, g_customer, g_new) g(camp, customer, new)
                 WHERE NOT g.new
                 GROUP BY g.camp, g.customer) d
         WHERE cc.campaign_id = d.camp AND cc.customer_id = d.customer;

        -- Each campaign's counter, last: its new uses and their discounts must fit as if
        -- nothing were given back (as above), then it moves once by both.
        SELECT array_agg(d.camp ORDER BY d.camp), array_agg(d.n ORDER BY d.camp),
               array_agg(d.money ORDER BY d.camp), array_agg(d.back ORDER BY d.camp),
               array_agg(d.refund ORDER BY d.camp)
          INTO k_ids, k_uses, k_money, k_back, k_refund
          FROM (SELECT g.camp, count(*) FILTER (WHERE g.new) AS n,
                       COALESCE(sum(g.money) FILTER (WHERE g.new), 0) AS money,
                       count(*) FILTER (WHERE NOT g.new) AS back,
                       COALESCE(sum(g.money) FILTER (WHERE NOT g.new), 0) AS refund
                  FROM unnest(g_camp, g_new, g_money) g(camp, new, money)
                 GROUP BY g.camp) d;
        PERFORM 1 FROM campaign_counter k WHERE k.campaign_id = ANY (k_ids)
         ORDER BY k.campaign_id
           FOR UPDATE;
        IF EXISTS (SELECT 1 FROM campaign_counter k
                     JOIN unnest(k_ids, k_uses, k_money) d(camp, n, money) ON k.campaign_id = d.camp
                    WHERE d.n > 0
                      AND (k.used + d.n > k.total_limit
                           OR k.budget_used + d.money > k.budget_amount)) THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422',
                MESSAGE = 'new uses past a campaign''s total or budget together';
        END IF;
        UPDATE campaign_counter k
           SET used = k.used + d.n - d.back, budget_used = k.budget_used + d.money - d.refund
          FROM unnest(k_ids, k_uses, k_money, k_back, k_refund) d(camp, n, money, back, refund)
         WHERE k.campaign_id = d.camp;
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written <> cardinality(k_ids) THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'a campaign without its counter';
        END IF;
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
