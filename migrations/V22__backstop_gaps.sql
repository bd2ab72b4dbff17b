-- The Postgres backstop, where it had gaps (docs/ARCHITECTURE.md, "The schema").
--
-- 1. A redemption's discount is never negative: a negative one would give money back to a
--    voucher's budget on every use. Added NOT VALID, then validated: validating scans the table
--    without blocking writes.
ALTER TABLE redemption ADD CONSTRAINT redemption_discount_amount_check
    CHECK (discount_amount >= 0) NOT VALID;
ALTER TABLE redemption VALIDATE CONSTRAINT redemption_discount_amount_check;

-- 2. The slot-caps check (voucher_slot_caps_sum, V3) skips a campaign code's slot, which V17
--    marks `campaign` so that a million codes are written in seconds. The mark was the way
--    around the check: an UPDATE setting it on a voucher's slots let their caps change freely.
--    It is set once, at insert, and never changes; and a campaign code has one slot, 0, so a
--    marked slot cannot be added beside a voucher's own (its slot 0 exists: the insert
--    conflicts, and an upsert's update of the cap is checked).
ALTER TABLE voucher_slot ADD CONSTRAINT voucher_slot_campaign_slot_zero
    CHECK (NOT campaign OR slot = 0);

CREATE FUNCTION fg_slot_campaign_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'voucher_slot.campaign of % never changes', OLD.voucher_code
          USING ERRCODE = 'check_violation', CONSTRAINT = 'voucher_slot_campaign_fixed';
END;
$$;

CREATE TRIGGER voucher_slot_campaign_fixed BEFORE UPDATE OF campaign ON voucher_slot
    FOR EACH ROW WHEN (NEW.campaign IS DISTINCT FROM OLD.campaign)
    EXECUTE FUNCTION fg_slot_campaign_fixed();

-- 3. campaign_counter.budget_used summed the discounts held even without a budget, where
--    nothing bounds it: large enough discounts overflowed the bigint, and every later use of
--    the campaign failed. Without a budget it stays 0; fg_patch_campaign counts what the codes
--    hold when a budget is given.
CREATE FUNCTION fg_campaign_budget_unused() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.budget_used := 0;
    RETURN NEW;
END;
$$;

CREATE TRIGGER campaign_counter_budget_unused BEFORE INSERT OR UPDATE ON campaign_counter
    FOR EACH ROW WHEN (NEW.budget_amount IS NULL)
    EXECUTE FUNCTION fg_campaign_budget_unused();

UPDATE campaign_counter SET budget_used = 0 WHERE budget_amount IS NULL AND budget_used <> 0;

-- fg_patch_campaign as in V20, counting the budget used when a campaign is given one.
CREATE OR REPLACE FUNCTION fg_patch_campaign(p_id BIGINT, p_active BOOLEAN, p_starts_at TIMESTAMPTZ,
                                  p_ends_at TIMESTAMPTZ,
                                  p_total_limit BIGINT, p_clear_total BOOLEAN,
                                  p_per_user_limit INT, p_clear_per_user BOOLEAN,
                                  p_budget_amount BIGINT, p_clear_budget BOOLEAN)
RETURNS TEXT LANGUAGE plpgsql AS $$
DECLARE
    k  RECORD;
    w  RECORD;
BEGIN
    SELECT * INTO k FROM campaign_counter c WHERE c.campaign_id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'NOT_FOUND';
    END IF;
    SELECT c.starts_at, c.ends_at INTO w FROM campaign c WHERE c.id = p_id FOR UPDATE;
    IF COALESCE(p_ends_at, w.ends_at) <= COALESCE(p_starts_at, w.starts_at) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'WINDOW',
              DETAIL = format('the window would be %s to %s',
                              COALESCE(p_starts_at, w.starts_at), COALESCE(p_ends_at, w.ends_at));
    END IF;
    IF p_total_limit < k.used THEN
        RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = 'LIMIT_BELOW_USED',
              DETAIL = format('%s uses are held', k.used);
    END IF;
    -- A campaign without a budget keeps budget_used at 0 (the trigger below): given one, it
    -- counts what its codes hold now. Under the counter's lock, which every use's merge takes:
    -- a merge committed before is in the sum, one waiting adds its discount after.
    IF k.budget_amount IS NULL AND p_budget_amount IS NOT NULL AND NOT p_clear_budget THEN
        SELECT COALESCE(sum(r.discount_amount), 0) INTO k.budget_used
          FROM voucher v
          JOIN redemption r ON r.voucher_code = v.code AND r.status IN (1, 2)
         WHERE v.campaign_id = p_id;
    END IF;
    IF p_budget_amount < k.budget_used THEN
        RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = 'BUDGET_BELOW_USED',
              DETAIL = format('%s is held', k.budget_used);
    END IF;
    UPDATE campaign_counter c
       SET total_limit = CASE WHEN p_clear_total THEN NULL
                              ELSE COALESCE(p_total_limit, c.total_limit) END,
           budget_amount = CASE WHEN p_clear_budget THEN NULL
                                ELSE COALESCE(p_budget_amount, c.budget_amount) END,
           budget_used = k.budget_used
     WHERE c.campaign_id = p_id;
    INSERT INTO campaign_rules (campaign_id, version, starts_at, ends_at, active, superseded_at)
    SELECT g.id, g.version, g.starts_at, g.ends_at, g.active, now()
      FROM campaign g WHERE g.id = p_id;
    UPDATE campaign g
       SET version = g.version + 1,
           active = COALESCE(p_active, g.active),
           starts_at = COALESCE(p_starts_at, g.starts_at),
           ends_at = COALESCE(p_ends_at, g.ends_at),
           per_user_limit = CASE WHEN p_clear_per_user THEN NULL
                                 ELSE COALESCE(p_per_user_limit, g.per_user_limit) END
     WHERE g.id = p_id;
    RETURN 'APPLIED';
END;
$$;
