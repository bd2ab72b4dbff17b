-- fg_merge_batch: many status changes in one round trip and one transaction, so one commit (one
-- WAL flush) serves them all: the mode-B consumer lands a whole queue batch this way, and mode
-- A's group commit its winners.
--
-- p_isolate: each change runs fg_merge in its own subtransaction (a plpgsql block with an
-- EXCEPTION clause is a savepoint): one that fails (a refusal raised as FG409, an unknown
-- voucher, a deadlock with another batch) is rolled back alone, locks included, and reported
-- in its row as SQLSTATE and message; the others still commit. Without it, a failing change
-- fails the whole call and nothing is applied: the caller runs it once plainly (a savepoint
-- costs about a third more per change, and failures are rare) and again isolated only when
-- that failed. Keep batches to 64 changes or fewer: past 64 subtransactions a transaction's
-- snapshot overflows its cache and every other backend's snapshots get slower.
-- Rows come back in the order given, `idx` counting from 1.
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
    p_revoke         BOOLEAN[],
    p_isolate        BOOLEAN
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

-- fg_reserve_batch: standard-mode reserves of many requests in one round trip and one
-- transaction (group commit in a long-running process), each exactly fg_reserve, answered in
-- the order given. p_isolate as for fg_merge_batch: a refusal fg_merge raises under lock
-- (FG409) fails the whole plain run, and the caller runs the batch again isolated.
CREATE FUNCTION fg_reserve_batch(
    p_codes          TEXT[],
    p_orders         TEXT[],
    p_customers      BIGINT[],
    p_order_amounts  BIGINT[],
    p_now            TIMESTAMPTZ[],
    p_isolate        BOOLEAN
) RETURNS TABLE (
    idx              INT,
    outcome          TEXT,
    customer_id      BIGINT,
    status           SMALLINT,
    discount_amount  BIGINT,
    expires_at       TIMESTAMPTZ,
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
