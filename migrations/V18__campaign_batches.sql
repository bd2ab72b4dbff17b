-- Campaigns' codes on the set-based path (V14, V16). V17 sent every batch that touched a
-- campaign's code to the loop of fg_reserve / fg_merge calls, and a campaign's winners cost three
-- times a voucher's (docs/BENCHMARKS.md, "Campaigns"). A batch of new reserves on campaigns'
-- codes now takes the voucher's few statements for the codes' own rows and counters, then
-- moves each campaign's counters once, last (the lock order of fg_merge: code customer -> code
-- slot -> code budget -> campaign customer -> campaign counter).
--
-- The set-based path still declines (FG422, and the loop decides each change as before)
-- whatever depends on the order of the batch's changes or that it does not know:
--   - a campaign's code changed other than by a new reserve (a confirm, a release, a
--     revocation: the loop gives back a campaign's use and discount);
--   - a reserve the campaign would refuse from the batch's snapshot: paused, outside its
--     window, its total reached, its budget left smaller than the discount, the customer at
--     the campaign's per-user limit; and a reserve whose code row's own copies of the pause
--     and window refuse it (they are written with the code and PATCH /campaigns does not move
--     them: fg_validate reads the campaign's, so fg_reserve_strict_single may not decide on
--     the copies);
--   - winners that do not fit the campaign's total, budget or per-user limit together, under
--     the campaign's locks (which of them the campaign refuses depends on their order).

-- The names the service calls; the bodies of V16 stay as fg_merge_strict_single and
-- fg_reserve_strict_single (V17), which call fg_merge_strict by name, so a reserve batch's
-- writes come through here too.
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
    c_pos      INT[];
    c_camp     BIGINT[];
    r_idx      INT[];
    r_outcome  TEXT[];
    r_customer BIGINT[];
    r_status   SMALLINT[];
    r_discount BIGINT[];
    r_expires  TIMESTAMPTZ[];
    r_flash    BOOLEAN[];
    r_ecode    TEXT[];
    r_emsg     TEXT[];
    w_camp     BIGINT[];
    w_customer BIGINT[];
    w_discount BIGINT[];
    k_ids      BIGINT[];
    k_uses     BIGINT[];
    k_money    BIGINT[];
    expected   INT;
    written    INT;
BEGIN
    -- The changes of campaigns' codes: their positions and campaigns. Each code is read by its
    -- key in a subquery the campaign test cannot reach (OFFSET 0): as a join, the test let the
    -- planner pick the partial index of campaigns' codes, (campaign_id, code), and walk all of
    -- it for each change while its statistics still said the table was small.
    SELECT array_agg(i.pos::INT ORDER BY i.pos), array_agg(v.campaign_id ORDER BY i.pos)
      INTO c_pos, c_camp
      FROM unnest(p_codes) WITH ORDINALITY i(code, pos)
     CROSS JOIN LATERAL (SELECT x.campaign_id FROM voucher x WHERE x.code = i.code OFFSET 0) v
     WHERE v.campaign_id IS NOT NULL;
    IF c_pos IS NULL THEN
        RETURN QUERY SELECT * FROM fg_merge_strict_single(p_codes, p_orders, p_customers, p_statuses,
                                                          p_order_amounts, p_discounts, p_reserved_at,
                                                          p_expires_at, p_reasons, p_now, p_revoke);
        RETURN;
    END IF;
    -- Of a campaign's code, new reserves only: then an APPLIED answer of the codes' path is a
    -- new use (a row that exists answers UNCHANGED or ORDER_CONFLICT, an order without a
    -- customer and without a row NOT_FOUND, and a use the code refuses raises, there being no
    -- revocation).
    IF EXISTS (SELECT 1 FROM unnest(c_pos) x(pos)
                WHERE p_statuses[x.pos] IS DISTINCT FROM 1
                   OR p_revoke[x.pos] IS DISTINCT FROM false) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422',
            MESSAGE = 'a campaign''s code changed other than by a new reserve';
    END IF;

    SELECT array_agg(s.idx ORDER BY s.idx), array_agg(s.outcome ORDER BY s.idx),
           array_agg(s.customer_id ORDER BY s.idx), array_agg(s.status ORDER BY s.idx),
           array_agg(s.discount_amount ORDER BY s.idx), array_agg(s.expires_at ORDER BY s.idx),
           array_agg(s.flash_sale ORDER BY s.idx), array_agg(s.error_code ORDER BY s.idx),
           array_agg(s.error_message ORDER BY s.idx)
      INTO r_idx, r_outcome, r_customer, r_status, r_discount, r_expires, r_flash, r_ecode,
           r_emsg
      FROM fg_merge_strict_single(p_codes, p_orders, p_customers, p_statuses, p_order_amounts,
                                  p_discounts, p_reserved_at, p_expires_at, p_reasons, p_now,
                                  p_revoke) s;

    -- The campaigns' new uses.
    SELECT array_agg(c.camp ORDER BY c.pos), array_agg(r.customer ORDER BY c.pos),
           array_agg(r.discount ORDER BY c.pos)
      INTO w_camp, w_customer, w_discount
      FROM unnest(c_pos, c_camp) c(pos, camp)
      JOIN unnest(r_idx, r_outcome, r_customer, r_discount) r(idx, outcome, customer, discount)
        ON r.idx = c.pos
     WHERE r.outcome = 'APPLIED';
    IF w_camp IS NOT NULL THEN
        -- Each customer's uses over the campaign: the counters that exist locked in key order,
        -- then all of the batch's must fit (the loop decides which are refused otherwise). The
        -- upsert checks again: a counter a concurrent transaction created meanwhile raises.
        PERFORM 1 FROM campaign_customer cc
          JOIN (SELECT DISTINCT w.camp, w.customer
                  FROM unnest(w_camp, w_customer) w(camp, customer)) d
            ON cc.campaign_id = d.camp AND cc.customer_id = d.customer
         ORDER BY cc.campaign_id, cc.customer_id
           FOR UPDATE OF cc;
        IF EXISTS (SELECT 1
                     FROM (SELECT w.camp, w.customer, count(*) AS n
                             FROM unnest(w_camp, w_customer) w(camp, customer)
                            GROUP BY w.camp, w.customer) d
                     JOIN campaign g ON g.id = d.camp
                    WHERE COALESCE((SELECT cc.active FROM campaign_customer cc
                                     WHERE cc.campaign_id = d.camp
                                       AND cc.customer_id = d.customer), 0) + d.n
                          > g.per_user_limit) THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422',
                MESSAGE = 'new uses past a campaign''s per-user limit together';
        END IF;
        SELECT count(DISTINCT (w.camp, w.customer)) INTO expected
          FROM unnest(w_camp, w_customer) w(camp, customer);
        INSERT INTO campaign_customer AS cc (campaign_id, customer_id, active)
        SELECT w.camp, w.customer, count(*)
          FROM unnest(w_camp, w_customer) w(camp, customer)
         GROUP BY w.camp, w.customer
         ORDER BY w.camp, w.customer
        ON CONFLICT (campaign_id, customer_id) DO UPDATE SET active = cc.active + EXCLUDED.active
         WHERE cc.active + EXCLUDED.active
               <= COALESCE((SELECT g.per_user_limit FROM campaign g WHERE g.id = cc.campaign_id),
                           cc.active + EXCLUDED.active);
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written <> expected THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422',
                MESSAGE = 'a campaign''s customer counter moved meanwhile';
        END IF;

        -- Each campaign's counter, last: moved once by its new uses and their discounts, if
        -- they all fit.
        SELECT array_agg(d.camp ORDER BY d.camp), array_agg(d.n ORDER BY d.camp),
               array_agg(d.money ORDER BY d.camp)
          INTO k_ids, k_uses, k_money
          FROM (SELECT w.camp, count(*) AS n, sum(w.discount) AS money
                  FROM unnest(w_camp, w_discount) w(camp, discount)
                 GROUP BY w.camp) d;
        PERFORM 1 FROM campaign_counter k WHERE k.campaign_id = ANY (k_ids)
         ORDER BY k.campaign_id
           FOR UPDATE;
        IF EXISTS (SELECT 1 FROM campaign_counter k
                     JOIN unnest(k_ids, k_uses, k_money) d(camp, n, money) ON k.campaign_id = d.camp
                    WHERE k.used + d.n > k.total_limit
                       OR k.budget_used + d.money > k.budget_amount) THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422',
                MESSAGE = 'new uses past a campaign''s total or budget together';
        END IF;
        UPDATE campaign_counter k SET used = k.used + d.n, budget_used = k.budget_used + d.money
          FROM unnest(k_ids, k_uses, k_money) d(camp, n, money)
         WHERE k.campaign_id = d.camp;
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written <> cardinality(k_ids) THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'a campaign without its counter';
        END IF;
    END IF;

    RETURN QUERY
    SELECT r.* FROM unnest(r_idx, r_outcome, r_customer, r_status, r_discount, r_expires, r_flash,
                           r_ecode, r_emsg) r
     ORDER BY 1;
END;
$$;

CREATE OR REPLACE FUNCTION fg_reserve_strict(p_codes TEXT[], p_orders TEXT[], p_customers BIGINT[],
                                  p_order_amounts BIGINT[], p_now TIMESTAMPTZ[])
RETURNS TABLE(idx INT, outcome TEXT, customer_id BIGINT, status SMALLINT,
              discount_amount BIGINT, expires_at TIMESTAMPTZ, error_code TEXT,
              error_message TEXT)
LANGUAGE plpgsql AS $$
BEGIN
    -- A new reserve of a campaign's code that the campaign, or its code row's copies of the
    -- campaign's pause and window, would refuse from this snapshot: the loop answers it as
    -- fg_validate does (a retry of a stored order is answered from its row, as for a voucher).
    IF EXISTS (
        SELECT 1
          FROM unnest(p_codes, p_orders, p_customers, p_order_amounts, p_now)
                 i(code, order_id, customer, order_amount, now)
          -- By the code's key, as in fg_merge_strict (OFFSET 0: no campaign test reaches it).
         CROSS JOIN LATERAL (SELECT x.* FROM voucher x WHERE x.code = i.code OFFSET 0) v
          JOIN campaign g ON g.id = v.campaign_id
          LEFT JOIN campaign_counter k ON k.campaign_id = g.id
         WHERE NOT EXISTS (SELECT 1 FROM redemption r
                            WHERE r.voucher_code = i.code AND r.order_id = i.order_id)
           AND (k.campaign_id IS NULL OR NOT g.active OR NOT v.active
                OR i.now < g.starts_at OR i.now >= g.ends_at
                OR i.now < v.starts_at OR i.now >= v.ends_at
                -- A scalar subquery: one probe of the key (as a join, the planner scanned
                -- every customer of the campaign for each request).
                OR COALESCE((SELECT gc.active FROM campaign_customer gc
                              WHERE gc.campaign_id = v.campaign_id
                                AND gc.customer_id = i.customer), 0) >= g.per_user_limit
                OR k.used >= k.total_limit
                OR k.budget_amount - k.budget_used
                   < fg_discount(i.order_amount, v.discount_amount, v.discount_percent,
                                 v.max_discount_amount))) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422',
            MESSAGE = 'a reserve a campaign decides';
    END IF;
    RETURN QUERY SELECT * FROM fg_reserve_strict_single(p_codes, p_orders, p_customers,
                                                        p_order_amounts, p_now);
END;
$$;

-- As V14 and V16 set for the bodies: plans by index, whatever the planner guesses of the
-- arrays unnested (a hash join or a sequential scan over a million codes' rows costs a batch
-- milliseconds).
ALTER FUNCTION fg_merge_strict SET enable_hashjoin = off;
ALTER FUNCTION fg_merge_strict SET enable_mergejoin = off;
ALTER FUNCTION fg_merge_strict SET enable_seqscan = off;
ALTER FUNCTION fg_reserve_strict SET enable_hashjoin = off;
ALTER FUNCTION fg_reserve_strict SET enable_mergejoin = off;
ALTER FUNCTION fg_reserve_strict SET enable_seqscan = off;

-- No longer called: the wrappers above find the campaigns' codes themselves.
DROP FUNCTION fg_any_campaign_code(TEXT[]);
