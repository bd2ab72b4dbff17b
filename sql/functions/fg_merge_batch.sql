-- fg_merge_batch: the loop: fg_merge on each change in turn, each in a savepoint of its own when
-- `p_isolate` (a change that raises fails alone). The service runs it only when fg_merge_strict
-- declines a batch (docs/ARCHITECTURE.md, "Batches: group commit and the consumer").

CREATE OR REPLACE FUNCTION fg_merge_batch(
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
    p_revoke boolean[],
    p_isolate boolean
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
#variable_conflict use_column
DECLARE
    m          RECORD;
    last_code  TEXT;
    last_flash BOOLEAN;
BEGIN
    FOR i IN 1 .. COALESCE(array_length(p_codes, 1), 0) LOOP
        idx := i;
        outcome := NULL; customer_id := NULL; status := NULL; discount_amount := NULL;
        expires_at := NULL; flash_sale := NULL; error_code := NULL; error_message := NULL;
        IF p_isolate THEN
            BEGIN
                SELECT * INTO m FROM fg_merge(p_codes[i], p_orders[i], p_customers[i],
                                              p_statuses[i], p_order_amounts[i], p_discounts[i],
                                              p_reserved_at[i], p_expires_at[i], p_reasons[i],
                                              p_now[i], p_revoke[i]);
            EXCEPTION WHEN OTHERS THEN
                error_code := SQLSTATE;
                error_message := SQLERRM;
            END;
        ELSE
            SELECT * INTO m FROM fg_merge(p_codes[i], p_orders[i], p_customers[i],
                                          p_statuses[i], p_order_amounts[i], p_discounts[i],
                                          p_reserved_at[i], p_expires_at[i], p_reasons[i],
                                          p_now[i], p_revoke[i]);
        END IF;
        IF error_code IS NULL THEN
            outcome := m.outcome;
            customer_id := m.customer_id;
            status := m.status;
            discount_amount := m.discount_amount;
            expires_at := m.expires_at;
            -- A batch is mostly one voucher's: read its kind once.
            IF last_code IS DISTINCT FROM p_codes[i] THEN
                last_code := p_codes[i];
                last_flash := (SELECT v.flash_sale FROM voucher v WHERE v.code = last_code);
            END IF;
            flash_sale := last_flash;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;
