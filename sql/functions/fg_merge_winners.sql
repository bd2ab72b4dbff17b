-- fg_merge_winners: a batch of new uses the gate granted (mode A's winners), written RESERVED
-- in the fewest statements: the rows inserted, the customers' counters upserted, each slot's
-- room taken once. It writes exactly what fg_merge_strict would for such a batch, and raises
-- FG422 (nothing written) for every batch that is not plainly that: an order already in
-- Postgres (a retry), a customer past the per-user limit, a slot without room, a campaign's
-- code, a change fg_merge would refuse. The caller then runs fg_merge_strict, which decides
-- those (docs/ARCHITECTURE.md, "Set-based batch writes").

CREATE OR REPLACE FUNCTION fg_merge_winners(
    p_codes text[],
    p_orders text[],
    p_customers bigint[],
    p_order_amounts bigint[],
    p_discounts bigint[],
    p_reserved_at timestamp with time zone[],
    p_expires_at timestamp with time zone[]
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
-- Its statements' shapes never change with the batch: plan them once per connection rather than
-- for every call (a custom plan each time cost a batch of 22 about a seventh of its CPU).
SET plan_cache_mode TO 'force_generic_plan'
AS $$
#variable_conflict use_column
DECLARE
    n         INT := COALESCE(array_length(p_codes, 1), 0);
    want      RECORD;
    pool_code TEXT[] := '{}';
    pool_slot SMALLINT[] := '{}';
    pool_room BIGINT[] := '{}';
    taken     SMALLINT[];
    rooms     BIGINT[];
    written   INT;
    expected  INT;
    b_codes   TEXT[];
    b_deltas  BIGINT[];
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    IF (SELECT count(DISTINCT (k.code, k.order_id)) FROM unnest(p_codes, p_orders) k(code, order_id)) <> n THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'an order twice in the batch';
    END IF;
    -- Only vouchers of their own, each change within its voucher's reservation TTL, and each
    -- customer's new uses within the per-user limit counted from the batch alone (the upsert
    -- below checks the counters that exist).
    IF EXISTS (SELECT 1
                 FROM unnest(p_codes, p_customers, p_reserved_at, p_expires_at)
                        i(code, customer, reserved_at, expires_at)
                 LEFT JOIN voucher v ON v.code = i.code
                WHERE v.code IS NULL OR v.campaign_id IS NOT NULL OR i.customer IS NULL
                   OR i.expires_at > i.reserved_at + make_interval(secs => v.reservation_ttl_seconds))
       OR EXISTS (SELECT 1
                    FROM unnest(p_codes, p_customers) i(code, customer)
                    JOIN voucher v ON v.code = i.code
                   GROUP BY i.code, i.customer, v.per_user_limit
                  HAVING count(*) > v.per_user_limit) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'not a batch of plain winners';
    END IF;

    -- The customers' counters first, as fg_merge_strict locks them before the slots: two
    -- batches then never wait on each other's locks in a circle.
    SELECT count(DISTINCT (i.code, i.customer)) INTO expected
      FROM unnest(p_codes, p_customers) i(code, customer);
    INSERT INTO voucher_customer AS vc (voucher_code, customer_id, active)
    SELECT i.code, i.customer, count(*)
      FROM unnest(p_codes, p_customers) i(code, customer)
     GROUP BY i.code, i.customer
     ORDER BY i.code, i.customer
    ON CONFLICT (voucher_code, customer_id) DO UPDATE SET active = vc.active + EXCLUDED.active
     WHERE vc.active + EXCLUDED.active
           <= (SELECT x.per_user_limit FROM voucher x WHERE x.code = vc.voucher_code);
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written <> expected THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'a customer past the per-user limit';
    END IF;

    -- Room for every winner (fg_slot_room), or the batch is not plain.
    FOR want IN SELECT i.code, count(*) AS wanted, min(i.order_id) AS first_order,
                       x.counter_slots AS k
                  FROM unnest(p_codes, p_orders) i(code, order_id)
                  JOIN voucher x ON x.code = i.code
                 GROUP BY i.code, x.counter_slots
                 ORDER BY i.code LOOP
        SELECT COALESCE(array_agg(r.slot ORDER BY r.ord), '{}'),
               COALESCE(array_agg(r.room ORDER BY r.ord), '{}')
          INTO taken, rooms
          FROM fg_slot_room(want.code, want.wanted, want.first_order, want.k)
                 WITH ORDINALITY r(slot, room, ord);
        IF COALESCE((SELECT sum(r) FROM unnest(rooms) r), 0) < want.wanted THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'not room for every winner';
        END IF;
        pool_code := pool_code || array_fill(want.code, ARRAY[cardinality(taken)]);
        pool_slot := pool_slot || taken;
        pool_room := pool_room || rooms;
    END LOOP;

    -- The rows, each winner in arrival order filling the pool's slots in turn. A key that exists
    -- (a retry whose first write landed) raises: fg_merge_strict answers it.
    WITH pool AS (
        SELECT p.code, p.slot,
               sum(p.room) OVER (PARTITION BY p.code ORDER BY p.ord) - p.room AS before,
               sum(p.room) OVER (PARTITION BY p.code ORDER BY p.ord) AS upto
          FROM unnest(pool_code, pool_slot, pool_room) WITH ORDINALITY p(code, slot, room, ord)),
    wins AS (
        SELECT i.*, row_number() OVER (PARTITION BY i.code ORDER BY i.idx) AS nth
          FROM unnest(p_codes, p_orders, p_customers, p_order_amounts, p_discounts,
                      p_reserved_at, p_expires_at)
                 WITH ORDINALITY AS i(code, order_id, customer, order_amount, discount,
                                      reserved_at, expires_at, idx))
    INSERT INTO redemption (voucher_code, order_id, customer_id, status, order_amount,
                            discount_amount, reserved_at, expires_at, slot)
    SELECT w.code, w.order_id, w.customer, 1, w.order_amount, w.discount, w.reserved_at,
           w.expires_at, p.slot
      FROM wins w
      JOIN pool p ON p.code = w.code AND w.nth > p.before AND w.nth <= p.upto
     ORDER BY w.code, w.order_id
    ON CONFLICT ON CONSTRAINT redemption_pkey DO NOTHING;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written <> n THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'an order already written';
    END IF;

    -- Each slot once, by the winners it took (locked above).
    UPDATE voucher_slot x SET used = x.used + d.used
      FROM (SELECT p.code, p.slot,
                   least(p.room, greatest(0, w.wanted - (sum(p.room) OVER (PARTITION BY p.code ORDER BY p.ord) - p.room))) AS used
              FROM unnest(pool_code, pool_slot, pool_room) WITH ORDINALITY p(code, slot, room, ord)
              JOIN (SELECT i.code, count(*) AS wanted FROM unnest(p_codes) i(code) GROUP BY i.code) w
                ON w.code = p.code) d
     WHERE x.voucher_code = d.code AND x.slot = d.slot AND d.used > 0;

    -- Budgets, as fg_merge_strict moves them.
    SELECT array_agg(d.code ORDER BY d.code), array_agg(d.delta ORDER BY d.code)
      INTO b_codes, b_deltas
      FROM (SELECT i.code, sum(i.discount) AS delta
              FROM unnest(p_codes, p_discounts) i(code, discount)
              JOIN voucher_budget b ON b.voucher_code = i.code
             GROUP BY i.code) d;
    IF b_codes IS NOT NULL THEN
        PERFORM fg_move_budgets(b_codes, b_deltas);
    END IF;

    RETURN QUERY
    SELECT i.idx::INT, 'APPLIED'::TEXT, i.customer, 1::SMALLINT, i.discount, i.expires_at,
           v.flash_sale, NULL::TEXT, NULL::TEXT
      FROM unnest(p_codes, p_customers, p_discounts, p_expires_at)
             WITH ORDINALITY AS i(code, customer, discount, expires_at, idx)
      JOIN voucher v ON v.code = i.code
     ORDER BY i.idx;
END;
$$;
