-- What a flash-sale campaign's gate needs of Postgres (docs/ARCHITECTURE.md, "Campaigns in the
-- gate"): a campaign is decided in Redis as one unit, its rules and counters in one set of keys
-- for all its codes.
--
--   - flash_sale: the campaign's codes are decided by the gate (set at creation, never changed,
--     as a voucher's);
--   - version: how many times its rules or limits were changed. The gate records the version
--     its copy was read at; the reconciler's compare-and-set only repairs a gate of the version
--     its figures were computed at, and mode B's consumer checks an event against the rules of
--     the version that granted it, as for a voucher;
--   - gate_loaded: the gate may hold the campaign (set before its first load, as
--     voucher.gate_loaded, V9): a campaign the gate held and lost may have events in flight, one
--     never held has none.
--
-- Two partial indexes keep the sweeper's campaign pass as long as what is live, not history:
-- the campaigns the gate may hold (reconciled, retired), and the flash-sale campaigns by the end
-- of their sale (those starting soon are loaded ahead), as V9 and V11 do for vouchers.
--
-- fg_patch_campaign is V17's, with the version counted.

ALTER TABLE campaign
    ADD COLUMN flash_sale  BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN version     BIGINT  NOT NULL DEFAULT 1,
    ADD COLUMN gate_loaded BOOLEAN NOT NULL DEFAULT false;

CREATE INDEX campaign_in_gate ON campaign (id) WHERE gate_loaded;
CREATE INDEX campaign_flash_by_end ON campaign (ends_at) WHERE flash_sale;

CREATE OR REPLACE FUNCTION fg_patch_campaign(p_id BIGINT, p_active BOOLEAN, p_starts_at TIMESTAMPTZ,
                                  p_ends_at TIMESTAMPTZ,
                                  p_total_limit BIGINT, p_clear_total BOOLEAN,
                                  p_per_user_limit INT, p_clear_per_user BOOLEAN,
                                  p_budget_amount BIGINT, p_clear_budget BOOLEAN)
RETURNS TEXT
LANGUAGE plpgsql AS $$
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
    IF p_budget_amount < k.budget_used THEN
        RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = 'BUDGET_BELOW_USED',
              DETAIL = format('%s is held', k.budget_used);
    END IF;
    UPDATE campaign_counter c
       SET total_limit = CASE WHEN p_clear_total THEN NULL
                              ELSE COALESCE(p_total_limit, c.total_limit) END,
           budget_amount = CASE WHEN p_clear_budget THEN NULL
                                ELSE COALESCE(p_budget_amount, c.budget_amount) END
     WHERE c.campaign_id = p_id;
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
