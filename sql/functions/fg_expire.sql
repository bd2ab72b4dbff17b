-- fg_expire(now, limit): one bounded batch of the sweeper's expiry: RESERVED rows past their
-- expiry, taken with SKIP LOCKED, released (reason EXPIRED) by fg_merge_set in the same
-- transaction; answers those that were released, with their flash flag, so that each use goes
-- back to its gate once (docs/ARCHITECTURE.md, "fg_expire").

CREATE OR REPLACE FUNCTION fg_expire(
    p_now timestamp with time zone,
    p_limit integer
)
RETURNS TABLE(
    voucher_code text,
    order_id text,
    customer_id bigint,
    flash_sale boolean
)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    codes      TEXT[];
    orders     TEXT[];
    customers  BIGINT[];
    slots      SMALLINT[];
    n          INT;
BEGIN
    SELECT array_agg(d.voucher_code ORDER BY d.voucher_code, d.order_id),
           array_agg(d.order_id ORDER BY d.voucher_code, d.order_id),
           array_agg(d.customer_id ORDER BY d.voucher_code, d.order_id),
           array_agg(d.slot ORDER BY d.voucher_code, d.order_id)
      INTO codes, orders, customers, slots
      FROM (SELECT r.voucher_code, r.order_id, r.customer_id, r.slot
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
    PERFORM 1 FROM voucher_slot s
      JOIN (SELECT DISTINCT unnest(codes) AS code, unnest(slots) AS slot) k
        ON s.voucher_code = k.code AND s.slot = k.slot
     ORDER BY s.voucher_code, s.slot
       FOR UPDATE OF s;

    n := array_length(codes, 1);
    RETURN QUERY
    SELECT codes[m.idx], orders[m.idx], customers[m.idx], m.flash_sale
      FROM fg_merge_set(codes, orders, array_fill(NULL::BIGINT, ARRAY[n]),
                        array_fill(3::SMALLINT, ARRAY[n]), array_fill(NULL::BIGINT, ARRAY[n]),
                        array_fill(NULL::BIGINT, ARRAY[n]), array_fill(NULL::TIMESTAMPTZ, ARRAY[n]),
                        array_fill(NULL::TIMESTAMPTZ, ARRAY[n]), array_fill('EXPIRED'::TEXT, ARRAY[n]),
                        array_fill(p_now, ARRAY[n]), array_fill(false, ARRAY[n])) m
     WHERE m.outcome = 'APPLIED'
     ORDER BY m.idx;
END;
$$;
