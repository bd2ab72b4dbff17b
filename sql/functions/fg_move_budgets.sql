-- fg_move_budgets(codes, deltas): each budgeted voucher's `used` moved once by its delta (a
-- batch's winners' discounts, or its given-back uses' negated), the rows locked in code order.
-- Raises FG422, having moved nothing, when the winners of a voucher do not fit its budget left
-- together: which of them is refused then depends on their order, and the loop decides
-- (fg_merge_strict, fg_merge_winners).

CREATE OR REPLACE FUNCTION fg_move_budgets(
    p_codes text[],
    p_deltas bigint[]
)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM 1 FROM voucher_budget b WHERE b.voucher_code = ANY (p_codes)
     ORDER BY b.voucher_code
       FOR UPDATE;
    IF EXISTS (SELECT 1 FROM voucher_budget b
                 JOIN unnest(p_codes, p_deltas) d(code, delta) ON b.voucher_code = d.code
                WHERE b.amount IS NOT NULL AND b.used + d.delta > b.amount) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'new uses past the budget together';
    END IF;
    UPDATE voucher_budget b SET used = b.used + d.delta
      FROM unnest(p_codes, p_deltas) d(code, delta)
     WHERE b.voucher_code = d.code;
END;
$$;
