-- fg_reserve_strict as in V18, sending to the loop a batch that holds two reserves of one
-- customer in one campaign with a per-user limit: the set-based path decided both from the
-- batch's snapshot, so a second use refused by its code's own limit answered OUT_OF_STOCK where
-- the loop, which sees the first use, answers ALREADY_USED (tests/it/set_merge.rs found it).
CREATE OR REPLACE FUNCTION fg_reserve_strict(p_codes TEXT[], p_orders TEXT[], p_customers BIGINT[],
                                             p_order_amounts BIGINT[], p_now TIMESTAMPTZ[])
RETURNS TABLE (idx INT, outcome TEXT, customer_id BIGINT, status SMALLINT,
               discount_amount BIGINT, expires_at TIMESTAMPTZ, error_code TEXT,
               error_message TEXT)
LANGUAGE plpgsql
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_seqscan = off
AS $$
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
    -- One customer's reserves of one campaign with a per-user limit, together: which of them
    -- is refused, and why (ALREADY_USED after the other's use, or the code's own
    -- OUT_OF_STOCK), depends on their order, which only the loop keeps.
    IF EXISTS (
        SELECT 1
          FROM unnest(p_codes, p_customers) i(code, customer)
         CROSS JOIN LATERAL (SELECT x.campaign_id FROM voucher x WHERE x.code = i.code OFFSET 0) v
          JOIN campaign g ON g.id = v.campaign_id AND g.per_user_limit IS NOT NULL
         GROUP BY v.campaign_id, i.customer
        HAVING count(*) > 1) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422',
            MESSAGE = 'one customer''s reserves of one campaign together';
    END IF;
    RETURN QUERY SELECT * FROM fg_reserve_strict_single(p_codes, p_orders, p_customers,
                                                        p_order_amounts, p_now);
END;
$$;
