-- fg_validate: what a reserve of this customer and amount would be answered now (eligibility,
-- then limits, then the discount), writing nothing: POST /vouchers/{code}/validations and the
-- first step of fg_reserve.

CREATE OR REPLACE FUNCTION fg_validate(
    p_code text,
    p_customer bigint,
    p_order_amount bigint,
    p_now timestamp with time zone
)
RETURNS TABLE(
    outcome text,
    discount_amount bigint,
    reservation_ttl_seconds integer
)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    s  RECORD;
    d  BIGINT;
BEGIN
    SELECT v.*, COALESCE(c.active, 0) AS customer_active,
           EXISTS (SELECT 1 FROM voucher_slot vs
                    WHERE vs.voucher_code = v.code AND vs.used < vs.cap) AS has_room,
           b.amount - b.used AS budget_left,
           g.active AS g_active, g.starts_at AS g_starts, g.ends_at AS g_ends,
           g.per_user_limit AS g_per_user, COALESCE(gc.active, 0) AS g_customer_active,
           k.total_limit - k.used AS g_room, k.budget_amount - k.budget_used AS g_budget_left
      INTO s
      FROM voucher v
      LEFT JOIN voucher_customer c ON c.voucher_code = v.code AND c.customer_id = p_customer
      LEFT JOIN voucher_budget b ON b.voucher_code = v.code
      LEFT JOIN campaign g ON g.id = v.campaign_id
      LEFT JOIN campaign_counter k ON k.campaign_id = v.campaign_id
      LEFT JOIN campaign_customer gc ON gc.campaign_id = v.campaign_id AND gc.customer_id = p_customer
     WHERE v.code = p_code;
    IF FOUND THEN
        d := fg_discount(p_order_amount, s.discount_amount, s.discount_percent,
                         s.max_discount_amount);
    END IF;
    -- For a campaign's code the campaign's pause and window are the code's (g_* are NULL
    -- for a single voucher).
    IF NOT FOUND THEN
        outcome := 'VOUCHER_NOT_FOUND';
    ELSIF NOT COALESCE(s.g_active, s.active) THEN
        outcome := 'INACTIVE';
    ELSIF p_now < COALESCE(s.g_starts, s.starts_at) THEN
        outcome := 'NOT_STARTED';
    ELSIF p_now >= COALESCE(s.g_ends, s.ends_at) THEN
        outcome := 'EXPIRED';
    ELSIF p_order_amount < s.min_order_amount THEN
        outcome := 'MIN_ORDER_AMOUNT';
    ELSIF s.customer_active >= s.per_user_limit OR s.g_customer_active >= s.g_per_user THEN
        outcome := 'ALREADY_USED';
    ELSIF NOT s.has_room OR s.g_room <= 0 THEN
        outcome := 'OUT_OF_STOCK';
    ELSIF s.budget_left < d OR s.g_budget_left < d THEN
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
