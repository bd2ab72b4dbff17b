-- fg_reserve: a standard reserve of one order: fg_validate's rules, then fg_merge with the
-- discount; a retry of a stored order is answered from its row (REPLAY).

CREATE OR REPLACE FUNCTION fg_reserve(
    p_code text,
    p_order text,
    p_customer bigint,
    p_order_amount bigint,
    p_now timestamp with time zone
)
RETURNS TABLE(
    outcome text,
    customer_id bigint,
    status smallint,
    discount_amount bigint,
    expires_at timestamp with time zone
)
LANGUAGE plpgsql
AS $$
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
        -- Each statement reads its own snapshot: a reserve of this very order may have
        -- committed between the look above and fg_validate's, and its use be what fg_validate
        -- refused for (ALREADY_USED, OUT_OF_STOCK). A retry answers as the first answer did.
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
