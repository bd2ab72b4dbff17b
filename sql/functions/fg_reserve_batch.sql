-- fg_reserve_batch: the loop: fg_reserve on each request in turn, each in a savepoint of its own
-- when `p_isolate`. The service runs it only when fg_reserve_strict declines a batch.

CREATE OR REPLACE FUNCTION fg_reserve_batch(
    p_codes text[],
    p_orders text[],
    p_customers bigint[],
    p_order_amounts bigint[],
    p_now timestamp with time zone[],
    p_isolate boolean
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
AS $$
#variable_conflict use_column
DECLARE
    m RECORD;
BEGIN
    FOR i IN 1 .. COALESCE(array_length(p_codes, 1), 0) LOOP
        idx := i;
        outcome := NULL; customer_id := NULL; status := NULL; discount_amount := NULL;
        expires_at := NULL; error_code := NULL; error_message := NULL;
        IF p_isolate THEN
            BEGIN
                SELECT * INTO m FROM fg_reserve(p_codes[i], p_orders[i], p_customers[i],
                                                p_order_amounts[i], p_now[i]);
            EXCEPTION WHEN OTHERS THEN
                error_code := SQLSTATE;
                error_message := SQLERRM;
            END;
        ELSE
            SELECT * INTO m FROM fg_reserve(p_codes[i], p_orders[i], p_customers[i],
                                            p_order_amounts[i], p_now[i]);
        END IF;
        IF error_code IS NULL THEN
            outcome := m.outcome;
            customer_id := m.customer_id;
            status := m.status;
            discount_amount := m.discount_amount;
            expires_at := m.expires_at;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;
