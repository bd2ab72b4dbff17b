-- fg_slot_campaign_fixed: a slot's `campaign` flag never changes (a trigger), so no slot can
-- leave the cap-sum check by being marked a campaign's.

CREATE OR REPLACE FUNCTION fg_slot_campaign_fixed()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION 'voucher_slot.campaign of % never changes', OLD.voucher_code
          USING ERRCODE = 'check_violation', CONSTRAINT = 'voucher_slot_campaign_fixed';
END;
$$;

DROP TRIGGER IF EXISTS voucher_slot_campaign_fixed ON voucher_slot;
CREATE TRIGGER voucher_slot_campaign_fixed BEFORE UPDATE OF campaign ON voucher_slot FOR EACH ROW WHEN ((new.campaign IS DISTINCT FROM old.campaign)) EXECUTE FUNCTION fg_slot_campaign_fixed();
