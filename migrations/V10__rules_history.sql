-- The rules a mode-B use was granted under.
--
-- The gate stamps each use it grants with the voucher's version its rules came from (meta's
-- `version`), and the event carries it; the consumer checks the event against that version's
-- rules (paused, window, minimum order, discount, expiry) before it merges, so an event the
-- rules never granted (forged, corrupted) cannot land a use or a discount. The current rules are
-- on the voucher row; a change keeps here the rules it replaces, for as long as an event granted
-- under them may still arrive: the sweeper deletes a row RULES_KEPT_DAYS after it was superseded
-- (an SQS queue keeps a message 14 days at most), so the table holds only the changes of the
-- last two weeks.
--
-- No foreign key to voucher, as for every table here (V1): vouchers are never deleted.
CREATE TABLE voucher_rules (
    voucher_code         TEXT        NOT NULL,
    version              BIGINT      NOT NULL,
    discount_amount      BIGINT,
    discount_percent     SMALLINT,
    max_discount_amount  BIGINT,
    min_order_amount     BIGINT      NOT NULL,
    starts_at            TIMESTAMPTZ NOT NULL,
    ends_at              TIMESTAMPTZ NOT NULL,
    active               BOOLEAN     NOT NULL,
    superseded_at        TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (voucher_code, version)
);
CREATE INDEX voucher_rules_superseded ON voucher_rules (superseded_at);

-- fg_patch_voucher as in V5, keeping the rules it replaces.
CREATE OR REPLACE FUNCTION fg_patch_voucher(
    p_code              TEXT,
    p_version           BIGINT,
    p_discount_amount   BIGINT,
    p_discount_percent  SMALLINT,
    p_max_discount      BIGINT,
    p_min_order_amount  BIGINT,
    p_total_limit       INT,
    p_per_user_limit    INT,
    p_starts_at         TIMESTAMPTZ,
    p_ends_at           TIMESTAMPTZ,
    p_active            BOOLEAN
) RETURNS TABLE (outcome TEXT, version BIGINT)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v  RECORD;
BEGIN
    SELECT x.version, x.total_limit INTO v FROM voucher x WHERE x.code = p_code FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'NOT_FOUND'::TEXT, NULL::BIGINT;
        RETURN;
    END IF;
    IF v.version <> p_version THEN
        RETURN QUERY SELECT 'STALE'::TEXT, v.version;
        RETURN;
    END IF;
    IF p_total_limit <> v.total_limit THEN
        PERFORM fg_resize_slots(p_code, p_total_limit);
    END IF;
    INSERT INTO voucher_rules (voucher_code, version, discount_amount, discount_percent,
                               max_discount_amount, min_order_amount, starts_at, ends_at,
                               active, superseded_at)
    SELECT x.code, x.version, x.discount_amount, x.discount_percent, x.max_discount_amount,
           x.min_order_amount, x.starts_at, x.ends_at, x.active, now()
      FROM voucher x WHERE x.code = p_code;
    UPDATE voucher x
       SET discount_amount = p_discount_amount,
           discount_percent = p_discount_percent,
           max_discount_amount = p_max_discount,
           min_order_amount = p_min_order_amount,
           per_user_limit = p_per_user_limit,
           starts_at = p_starts_at,
           ends_at = p_ends_at,
           active = p_active,
           version = x.version + 1
     WHERE x.code = p_code;
    RETURN QUERY SELECT 'APPLIED'::TEXT, v.version + 1;
END;
$$;
