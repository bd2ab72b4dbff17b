-- fg_forget_idle_campaign_customer: a campaign's customer counter brought to 0 is deleted in the
-- same transaction (a trigger), so the table holds the customers holding a use, not every
-- customer who ever had one.

CREATE OR REPLACE FUNCTION fg_forget_idle_campaign_customer()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM campaign_customer c
     WHERE c.campaign_id = NEW.campaign_id AND c.customer_id = NEW.customer_id
       AND c.active = 0;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS campaign_customer_at_zero ON campaign_customer;
CREATE TRIGGER campaign_customer_at_zero AFTER UPDATE OF active ON campaign_customer FOR EACH ROW WHEN ((new.active = 0)) EXECUTE FUNCTION fg_forget_idle_campaign_customer();
