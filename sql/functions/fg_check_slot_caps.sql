-- fg_check_slot_caps: a voucher's slot caps sum to its total_limit at every commit that changes
-- a cap or the limit (deferred constraint triggers; a campaign's codes, whose one slot the
-- campaign caps, excepted: docs/ARCHITECTURE.md, "Counter slots").

CREATE OR REPLACE FUNCTION fg_check_slot_caps()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_code   TEXT;
    v_limit  INT;
    v_caps   BIGINT;
BEGIN
    IF TG_TABLE_NAME = 'voucher' THEN
        v_code := NEW.code;
    ELSE
        v_code := COALESCE(NEW.voucher_code, OLD.voucher_code);
    END IF;
    SELECT total_limit INTO v_limit FROM voucher WHERE code = v_code;
    SELECT COALESCE(sum(cap), 0) INTO v_caps FROM voucher_slot WHERE voucher_code = v_code;
    IF v_limit IS NOT NULL AND v_caps <> v_limit THEN
        RAISE EXCEPTION 'voucher %: slot caps sum to %, total_limit is %', v_code, v_caps, v_limit
              USING ERRCODE = 'check_violation', CONSTRAINT = 'voucher_slot_caps_sum';
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS voucher_slot_caps_sum ON voucher_slot;
CREATE CONSTRAINT TRIGGER voucher_slot_caps_sum AFTER INSERT OR UPDATE OF cap, voucher_code ON voucher_slot DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((NOT new.campaign)) EXECUTE FUNCTION fg_check_slot_caps();

DROP TRIGGER IF EXISTS voucher_slot_caps_sum_deleted ON voucher_slot;
CREATE CONSTRAINT TRIGGER voucher_slot_caps_sum_deleted AFTER DELETE ON voucher_slot DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((NOT old.campaign)) EXECUTE FUNCTION fg_check_slot_caps();

DROP TRIGGER IF EXISTS voucher_total_limit_caps_sum ON voucher;
CREATE CONSTRAINT TRIGGER voucher_total_limit_caps_sum AFTER INSERT OR UPDATE OF total_limit ON voucher DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((new.campaign_id IS NULL)) EXECUTE FUNCTION fg_check_slot_caps();
