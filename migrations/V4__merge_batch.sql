-- fg_merge_batch: many status changes in one round trip and one transaction, so one commit (one
-- WAL flush) serves them all: the mode-B consumer lands a whole queue batch this way.
--
-- Each change runs fg_merge in its own subtransaction (a plpgsql block with an EXCEPTION clause
-- is a savepoint): one that fails (a refusal raised as FG409, an unknown voucher, a deadlock
-- with another batch) is rolled back alone, locks included, and reported in its row as
-- SQLSTATE and message; the others still commit. Rows come back in the order given, `idx`
-- counting from 1.
CREATE FUNCTION fg_merge_batch(
    p_codes          TEXT[],
    p_orders         TEXT[],
    p_customers      BIGINT[],
    p_statuses       SMALLINT[],
    p_order_amounts  BIGINT[],
    p_discounts      BIGINT[],
    p_reserved_at    TIMESTAMPTZ[],
    p_expires_at     TIMESTAMPTZ[],
    p_reasons        TEXT[],
    p_now            TIMESTAMPTZ[],
    p_revoke         BOOLEAN[]
) RETURNS TABLE (
    idx              INT,
    outcome          TEXT,
    customer_id      BIGINT,
    status           SMALLINT,
    discount_amount  BIGINT,
    expires_at       TIMESTAMPTZ,
    flash_sale       BOOLEAN,
    error_code       TEXT,
    error_message    TEXT
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    m RECORD;
BEGIN
    FOR i IN 1 .. COALESCE(array_length(p_codes, 1), 0) LOOP
        idx := i;
        outcome := NULL; customer_id := NULL; status := NULL; discount_amount := NULL;
        expires_at := NULL; flash_sale := NULL; error_code := NULL; error_message := NULL;
        BEGIN
            SELECT * INTO m FROM fg_merge(p_codes[i], p_orders[i], p_customers[i], p_statuses[i],
                                          p_order_amounts[i], p_discounts[i], p_reserved_at[i],
                                          p_expires_at[i], p_reasons[i], p_now[i], p_revoke[i]);
            outcome := m.outcome;
            customer_id := m.customer_id;
            status := m.status;
            discount_amount := m.discount_amount;
            expires_at := m.expires_at;
            flash_sale := (SELECT v.flash_sale FROM voucher v WHERE v.code = p_codes[i]);
        EXCEPTION WHEN OTHERS THEN
            error_code := SQLSTATE;
            error_message := SQLERRM;
        END;
        RETURN NEXT;
    END LOOP;
END;
$$;
