-- fg_merge_set: fg_merge_strict, or the loop when it declines, in one call of SQL (the
-- sweeper's fg_expire uses it; the service does the same fall-back in Rust, which spares a batch
-- the savepoint).

CREATE OR REPLACE FUNCTION fg_merge_set(
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
AS $$
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
