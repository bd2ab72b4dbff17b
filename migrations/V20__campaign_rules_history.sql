-- The rules a flash-sale campaign's mode-B use was granted under (docs/ARCHITECTURE.md,
-- "Campaigns in the gate"), as voucher_rules (V10) keeps a voucher's.
--
-- A campaign's gate stamps each use it grants with the campaign's version (meta's `version`),
-- and the event carries it; the consumer checks the event against that version's rules before
-- it merges. The current rules are on the campaign row; a change (fg_patch_campaign) keeps here
-- the rules it replaces, for as long as an event granted under them may still arrive: the
-- sweeper deletes a row 14 days after it was superseded, with voucher_rules' (an SQS queue keeps
-- a message 14 days at most), so the table holds only the last two weeks' changes.
--
-- A PATCH changes a campaign's pause and window (its discount, minimum order and reservation TTL
-- never change), so these are what is kept. Its limits and budget are not: Postgres' counters
-- check them at the merge whatever the version.
CREATE TABLE campaign_rules (
    campaign_id    BIGINT      NOT NULL,
    version        BIGINT      NOT NULL,
    starts_at      TIMESTAMPTZ NOT NULL,
    ends_at        TIMESTAMPTZ NOT NULL,
    active         BOOLEAN     NOT NULL,
    superseded_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (campaign_id, version)
);
CREATE INDEX campaign_rules_superseded ON campaign_rules (superseded_at);

-- fg_patch_campaign as in V19, keeping the rules it replaces.
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
