-- fg_campaign_budget_unused: a campaign's counter without a budget keeps `budget_used` at 0, so
-- discounts that nothing limits never add up towards a bigint's end (a trigger on
-- campaign_counter; docs/ARCHITECTURE.md, "Campaigns").

CREATE OR REPLACE FUNCTION fg_campaign_budget_unused()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.budget_used := 0;
    RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS campaign_counter_budget_unused ON campaign_counter;
CREATE TRIGGER campaign_counter_budget_unused BEFORE INSERT OR UPDATE ON campaign_counter FOR EACH ROW WHEN ((new.budget_amount IS NULL)) EXECUTE FUNCTION fg_campaign_budget_unused();
