-- fg_patch_campaign: PATCH /campaigns/{id}: the rules and limits changed under the counter's
-- lock, refused below what is held (FG409 LIMIT_BELOW_USED, BUDGET_BELOW_USED), the replaced
-- rules kept for mode B's consumer (campaign_rules).

CREATE OR REPLACE FUNCTION fg_patch_campaign(
    p_id bigint,
    p_active boolean,
    p_starts_at timestamp with time zone,
    p_ends_at timestamp with time zone,
    p_total_limit bigint,
    p_clear_total boolean,
    p_per_user_limit integer,
    p_clear_per_user boolean,
    p_budget_amount bigint,
    p_clear_budget boolean
)
RETURNS text
LANGUAGE plpgsql
AS $$
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
