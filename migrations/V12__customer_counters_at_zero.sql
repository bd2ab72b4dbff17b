-- A customer's counter at zero is no counter: it goes.
--
-- `voucher_customer` holds each customer's active uses of a voucher. When they all came back
-- (released, expired, revoked) the row stayed at 0, for good: one row per customer who ever
-- released a use of any voucher, a table that grew with history and that nothing read (every
-- reader takes a missing row as 0: fg_reserve and fg_validate join it LEFT, the warm-up reads
-- the rows above 0). Now the update that brings a row to 0 deletes it, in the same transaction
-- and under the row lock it already holds; the next reserve of that customer inserts it again
-- (`INSERT .. ON CONFLICT`, which retries as an insert when the row it waited on was deleted).
-- A trigger rather than a fourth copy of fg_merge: every decrement (fg_merge's release, its
-- out-of-stock undo, fg_expire through fg_merge) is covered, and the WHEN clause is checked
-- without calling the function, so the other updates cost nothing more.
CREATE FUNCTION fg_forget_idle_customer() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM voucher_customer c
     WHERE c.voucher_code = NEW.voucher_code AND c.customer_id = NEW.customer_id
       AND c.active = 0;
    RETURN NULL;
END;
$$;

CREATE TRIGGER voucher_customer_at_zero
    AFTER UPDATE OF active ON voucher_customer
    FOR EACH ROW WHEN (NEW.active = 0)
    EXECUTE FUNCTION fg_forget_idle_customer();

-- The rows left at 0 so far go in V13, a transaction of their own: this one holds the trigger's
-- table lock, which would stop every reserve and release for the length of that delete.
