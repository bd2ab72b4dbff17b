-- fg_reserve_strict: a batch of standard reserves written set-based: each request validated
-- from one snapshot as fg_validate decides it (a retry of a stored order answered from its row),
-- the eligible ones written by fg_merge_strict. It raises (FG422, nothing written) where the
-- answer could depend on the batch's order or on what a campaign decides: an order twice in the
-- batch, a reserve a campaign (or its code row's copies of the campaign's pause and window)
-- would refuse from this snapshot, one customer's reserves of one per-user-limited campaign
-- together; the caller then runs the loop, fg_reserve_batch (docs/ARCHITECTURE.md, "Set-based
-- batch writes" and "Campaigns").

CREATE OR REPLACE FUNCTION fg_reserve_strict(
    p_codes text[],
    p_orders text[],
    p_customers bigint[],
    p_order_amounts bigint[],
    p_now timestamp with time zone[]
)
RETURNS TABLE(
    idx integer,
    outcome text,
    customer_id bigint,
    status smallint,
    discount_amount bigint,
    expires_at timestamp with time zone,
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
