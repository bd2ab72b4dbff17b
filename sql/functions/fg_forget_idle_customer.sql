-- fg_forget_idle_customer: a voucher's customer counter brought to 0 is deleted in the same
-- transaction (a trigger), so the table holds the customers holding a use, not every customer
-- who ever had one.

CREATE OR REPLACE FUNCTION fg_forget_idle_customer()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM voucher_customer c
     WHERE c.voucher_code = NEW.voucher_code AND c.customer_id = NEW.customer_id
       AND c.active = 0;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS voucher_customer_at_zero ON voucher_customer;
CREATE TRIGGER voucher_customer_at_zero AFTER UPDATE OF active ON voucher_customer FOR EACH ROW WHEN ((new.active = 0)) EXECUTE FUNCTION fg_forget_idle_customer();
