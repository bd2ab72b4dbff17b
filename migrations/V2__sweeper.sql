-- fg_expire: one bounded batch of the sweeper's expiry pass.
--
-- Takes up to p_limit RESERVED rows past their expiry, skipping rows another sweeper (or a
-- confirm) holds, and releases each with fg_merge (reason EXPIRED), so the counters move in this
-- same transaction and by the same rules as every other status change. Two sweepers at once
-- take disjoint rows; and should a row still be met twice, the lattice makes the second merge
-- UNCHANGED, and only APPLIED rows are returned: each expired use is released exactly once.
--
-- Lock order matches reserve and release (customer rows, then the voucher row), taken up front
-- in key order: a batch never waits on a reserve that waits on it, nor on another batch.
-- Returns the released rows and whether their voucher is a flash-sale one (its gate gets the
-- use back next).
CREATE FUNCTION fg_expire(p_now TIMESTAMPTZ, p_limit INT)
RETURNS TABLE (voucher_code TEXT, order_id TEXT, customer_id BIGINT, flash_sale BOOLEAN)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    codes      TEXT[];
    orders     TEXT[];
    customers  BIGINT[];
    m          RECORD;
BEGIN
    SELECT array_agg(d.voucher_code ORDER BY d.voucher_code, d.order_id),
           array_agg(d.order_id ORDER BY d.voucher_code, d.order_id),
           array_agg(d.customer_id ORDER BY d.voucher_code, d.order_id)
      INTO codes, orders, customers
      FROM (SELECT r.voucher_code, r.order_id, r.customer_id
              FROM redemption r
             WHERE r.status = 1 AND r.expires_at < p_now
             ORDER BY r.expires_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) d;
    IF codes IS NULL THEN
        RETURN;
    END IF;

    PERFORM 1 FROM voucher_customer c
      JOIN (SELECT DISTINCT unnest(codes) AS code, unnest(customers) AS customer) k
        ON c.voucher_code = k.code AND c.customer_id = k.customer
     ORDER BY c.voucher_code, c.customer_id
       FOR UPDATE OF c;
    PERFORM 1 FROM voucher v
     WHERE v.code = ANY (codes)
     ORDER BY v.code
       FOR UPDATE;

    FOR i IN 1 .. array_length(codes, 1) LOOP
        SELECT * INTO m FROM fg_merge(codes[i], orders[i], NULL, 3::SMALLINT, NULL, NULL,
                                      NULL, NULL, 'EXPIRED', p_now, false);
        IF m.outcome = 'APPLIED' THEN
            voucher_code := codes[i];
            order_id := orders[i];
            customer_id := customers[i];
            flash_sale := (SELECT v.flash_sale FROM voucher v WHERE v.code = codes[i]);
            RETURN NEXT;
        END IF;
    END LOOP;
END;
$$;
