-- Campaigns of unique codes: one set of rules and limits over many codes, each code a voucher.
--
-- A campaign's code is a row of `voucher` like any other (`campaign_id` names its campaign), so
-- reserve, confirm, release, validation, expiry and the views work with it unchanged: its own
-- limit is `perCodeLimit` (one slot, capped at it). The campaign adds counters over all its
-- codes, kept by fg_merge, the one status change, with the same guarantee as a voucher's
-- slots: Postgres refuses a commit that would take a campaign past its total, a customer past
-- the campaign's per-user limit, or the discounts past its budget, whatever any layer above did.
--
--   campaign           the rules (discount, window, pause, TTL, per-code and per-user limits);
--                      for its codes, the campaign's window and pause are the ones that count
--   campaign_counter   one row per campaign: active uses and the money they take, each with
--                      its CHECK against the limit and the budget (NULL: none)
--   campaign_customer  a customer's active uses over the campaign, deleted at zero (as
--                      voucher_customer)
--
-- Lock order, everywhere: the code's customer counter, its slot, its budget, then the
-- campaign's customer counter and the campaign counter. A code's rows are its own; the
-- campaign counter is one row that every winner of the campaign updates last, for as short a
-- time as its commit.
--
-- A million codes must be written in seconds: a code's slot row is marked `campaign` and its
-- insert skips the deferred cap-sum trigger (a code has one slot whose cap is its limit, and
-- neither changes: a code is never patched on its own); the voucher row's trigger is skipped
-- the same way.

CREATE TABLE campaign (
    id                      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    discount_amount         BIGINT CHECK (discount_amount >= 0 AND discount_amount <= 1000000000000000),
    discount_percent        SMALLINT CHECK (discount_percent BETWEEN 1 AND 100),
    max_discount_amount     BIGINT CHECK (max_discount_amount >= 0 AND max_discount_amount <= 1000000000000000),
    min_order_amount        BIGINT NOT NULL DEFAULT 0 CHECK (min_order_amount >= 0 AND min_order_amount <= 1000000000000000),
    starts_at               TIMESTAMPTZ NOT NULL,
    ends_at                 TIMESTAMPTZ NOT NULL,
    reservation_ttl_seconds INT NOT NULL,
    active                  BOOLEAN NOT NULL DEFAULT true,
    per_code_limit          INT NOT NULL CHECK (per_code_limit >= 1),
    per_user_limit          INT CHECK (per_user_limit >= 1),
    code_count              BIGINT NOT NULL DEFAULT 0,
    created_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT campaign_one_discount CHECK ((discount_amount IS NULL) <> (discount_percent IS NULL)),
    CONSTRAINT campaign_cap_only_with_percent CHECK (max_discount_amount IS NULL OR discount_percent IS NOT NULL),
    CONSTRAINT campaign_window CHECK (ends_at > starts_at)
);

CREATE TABLE campaign_counter (
    campaign_id    BIGINT PRIMARY KEY,   -- no foreign key: see V1 and "The schema"
    total_limit    BIGINT CHECK (total_limit >= 0),
    used           BIGINT NOT NULL DEFAULT 0,
    budget_amount  BIGINT CHECK (budget_amount >= 0 AND budget_amount <= 1000000000000000),
    budget_used    BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT campaign_used_within_limit CHECK (used >= 0 AND (total_limit IS NULL OR used <= total_limit)),
    CONSTRAINT campaign_budget_used_within_amount
        CHECK (budget_used >= 0 AND (budget_amount IS NULL OR budget_used <= budget_amount))
);

CREATE TABLE campaign_customer (
    campaign_id  BIGINT NOT NULL,
    customer_id  BIGINT NOT NULL CHECK (customer_id >= 1),
    active       INT NOT NULL CHECK (active >= 0),
    PRIMARY KEY (campaign_id, customer_id)
);

CREATE FUNCTION fg_forget_idle_campaign_customer() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM campaign_customer c
     WHERE c.campaign_id = NEW.campaign_id AND c.customer_id = NEW.customer_id
       AND c.active = 0;
    RETURN NULL;
END;
$$;

CREATE TRIGGER campaign_customer_at_zero AFTER UPDATE OF active ON campaign_customer
    FOR EACH ROW WHEN (NEW.active = 0) EXECUTE FUNCTION fg_forget_idle_campaign_customer();

ALTER TABLE voucher ADD COLUMN campaign_id BIGINT;
-- A campaign's codes in code order: its listing's keyset pages.
CREATE INDEX voucher_by_campaign ON voucher (campaign_id, code) WHERE campaign_id IS NOT NULL;
-- The vouchers' listing leaves the codes of campaigns out (they are listed by campaign).
CREATE INDEX voucher_single ON voucher (code) WHERE campaign_id IS NULL;

ALTER TABLE voucher_slot ADD COLUMN campaign BOOLEAN NOT NULL DEFAULT false;

DROP TRIGGER voucher_total_limit_caps_sum ON voucher;
CREATE CONSTRAINT TRIGGER voucher_total_limit_caps_sum
    AFTER INSERT OR UPDATE OF total_limit ON voucher
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.campaign_id IS NULL) EXECUTE FUNCTION fg_check_slot_caps();
DROP TRIGGER voucher_slot_caps_sum ON voucher_slot;
CREATE CONSTRAINT TRIGGER voucher_slot_caps_sum
    AFTER INSERT OR UPDATE OF cap, voucher_code ON voucher_slot
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NOT NEW.campaign) EXECUTE FUNCTION fg_check_slot_caps();
CREATE CONSTRAINT TRIGGER voucher_slot_caps_sum_deleted
    AFTER DELETE ON voucher_slot
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NOT OLD.campaign) EXECUTE FUNCTION fg_check_slot_caps();

-- fg_validate: as in V16, with a campaign's code answering for its campaign too: the
-- campaign's pause and window, its per-user limit, its total and its budget, each in the
-- place of the voucher's own refusal of the same kind.
CREATE OR REPLACE FUNCTION fg_validate(
    p_code          TEXT,
    p_customer      BIGINT,
    p_order_amount  BIGINT,
    p_now           TIMESTAMPTZ
) RETURNS TABLE (
    outcome                  TEXT,
    discount_amount          BIGINT,
    reservation_ttl_seconds  INT
)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    s  RECORD;
    d  BIGINT;
BEGIN
    SELECT v.*, COALESCE(c.active, 0) AS customer_active,
           EXISTS (SELECT 1 FROM voucher_slot vs
                    WHERE vs.voucher_code = v.code AND vs.used < vs.cap) AS has_room,
           b.amount - b.used AS budget_left,
           g.active AS g_active, g.starts_at AS g_starts, g.ends_at AS g_ends,
           g.per_user_limit AS g_per_user, COALESCE(gc.active, 0) AS g_customer_active,
           k.total_limit - k.used AS g_room, k.budget_amount - k.budget_used AS g_budget_left
      INTO s
      FROM voucher v
      LEFT JOIN voucher_customer c ON c.voucher_code = v.code AND c.customer_id = p_customer
      LEFT JOIN voucher_budget b ON b.voucher_code = v.code
      LEFT JOIN campaign g ON g.id = v.campaign_id
      LEFT JOIN campaign_counter k ON k.campaign_id = v.campaign_id
      LEFT JOIN campaign_customer gc ON gc.campaign_id = v.campaign_id AND gc.customer_id = p_customer
     WHERE v.code = p_code;
    IF FOUND THEN
        d := fg_discount(p_order_amount, s.discount_amount, s.discount_percent,
                         s.max_discount_amount);
    END IF;
    -- For a campaign's code the campaign's pause and window are the code's (g_* are NULL
    -- for a single voucher).
    IF NOT FOUND THEN
        outcome := 'VOUCHER_NOT_FOUND';
    ELSIF NOT COALESCE(s.g_active, s.active) THEN
        outcome := 'INACTIVE';
    ELSIF p_now < COALESCE(s.g_starts, s.starts_at) THEN
        outcome := 'NOT_STARTED';
    ELSIF p_now >= COALESCE(s.g_ends, s.ends_at) THEN
        outcome := 'EXPIRED';
    ELSIF p_order_amount < s.min_order_amount THEN
        outcome := 'MIN_ORDER_AMOUNT';
    ELSIF s.customer_active >= s.per_user_limit OR s.g_customer_active >= s.g_per_user THEN
        outcome := 'ALREADY_USED';
    ELSIF NOT s.has_room OR s.g_room <= 0 THEN
        outcome := 'OUT_OF_STOCK';
    ELSIF s.budget_left < d OR s.g_budget_left < d THEN
        outcome := 'BUDGET_EXHAUSTED';
    ELSE
        outcome := 'ELIGIBLE';
    END IF;
    IF outcome = 'ELIGIBLE' THEN
        discount_amount := d;
        reservation_ttl_seconds := s.reservation_ttl_seconds;
    END IF;
    RETURN NEXT;
END;
$$;

-- fg_merge: as in V16, with a campaign's code taking the campaign's counters after its own
-- (lock order), and giving them back with its use.
CREATE OR REPLACE FUNCTION fg_merge(p_code text, p_order text, p_customer bigint, p_status smallint, p_order_amount bigint, p_discount bigint, p_reserved_at timestamp with time zone, p_expires_at timestamp with time zone, p_reason text, p_now timestamp with time zone, p_revoke boolean) RETURNS TABLE(outcome text, customer_id bigint, status smallint, discount_amount bigint, expires_at timestamp with time zone)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    r         redemption%ROWTYPE;
    old_st    SMALLINT := 0;           -- 0 = no row
    new_st    SMALLINT;
    refusal   TEXT;
    v_slots   SMALLINT;
    v_per     INT;
    v_ttl     INT;
    taken     SMALLINT;
    v_camp    BIGINT;
    v_cper    INT;
    budgeted  BOOLEAN := false;
BEGIN
    IF p_status NOT IN (1, 2, 3) THEN
        RAISE EXCEPTION 'fg_merge: bad status %', p_status;
    END IF;
    -- A plain read: the voucher row is never locked or written by a status change.
    SELECT v.counter_slots, v.per_user_limit, v.reservation_ttl_seconds, v.campaign_id
      INTO v_slots, v_per, v_ttl, v_camp
      FROM voucher v WHERE v.code = p_code;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fg_merge: unknown voucher %', p_code USING ERRCODE = 'FG404';
    END IF;
    -- Every reservation the service grants expires exactly its voucher's TTL after it was made
    -- (the TTL never changes). A later expiry was not written by the service: an event copied
    -- or forged to hold a use for years. A constraint violation, so the consumer sends it to
    -- the dead letters at once.
    IF p_customer IS NOT NULL
       AND p_expires_at > p_reserved_at + make_interval(secs => v_ttl) THEN
        RAISE EXCEPTION 'expiresAt is more than the voucher''s reservation TTL (% s) after reservedAt', v_ttl
              USING ERRCODE = 'check_violation';
    END IF;

    LOOP
        -- A caller that knows the customer claims the key first: for a new reservation (every
        -- winner) that is the one statement it needs. A concurrent claimer of the same key
        -- blocks on the unique index until we commit, then finds our row below: retries of one
        -- order never both count. If we roll back instead, it claims the key itself.
        IF p_customer IS NOT NULL THEN
            INSERT INTO redemption AS x (voucher_code, order_id, customer_id, status,
                                         order_amount, discount_amount, reserved_at, expires_at,
                                         confirmed_at, released_at, release_reason)
            VALUES (p_code, p_order, p_customer, p_status, p_order_amount, p_discount,
                    p_reserved_at, p_expires_at,
                    CASE WHEN p_status = 2 THEN p_now END,
                    CASE WHEN p_status = 3 THEN p_now END,
                    CASE WHEN p_status = 3 THEN COALESCE(p_reason, 'CANCELLED') END)
            ON CONFLICT ON CONSTRAINT redemption_pkey DO NOTHING
            RETURNING x.* INTO r;
            EXIT WHEN FOUND;   -- old_st stays 0: the row is new
        END IF;
        SELECT * INTO r FROM redemption
         WHERE redemption.voucher_code = p_code AND redemption.order_id = p_order
           FOR UPDATE;
        IF FOUND THEN
            old_st := r.status;
            EXIT;
        END IF;
        IF p_customer IS NULL THEN
            RETURN QUERY SELECT 'NOT_FOUND'::TEXT, NULL::BIGINT, NULL::SMALLINT, NULL::BIGINT, NULL::TIMESTAMPTZ;
            RETURN;
        END IF;
        -- The row we met was rolled back meanwhile: claim the key again.
    END LOOP;

    IF old_st <> 0 AND p_customer IS NOT NULL AND r.customer_id <> p_customer THEN
        RETURN QUERY SELECT 'ORDER_CONFLICT'::TEXT, r.customer_id, r.status, r.discount_amount, r.expires_at;
        RETURN;
    END IF;

    new_st := GREATEST(old_st, p_status);
    IF old_st <> 0 AND new_st = old_st THEN
        RETURN QUERY SELECT 'UNCHANGED'::TEXT, r.customer_id, r.status, r.discount_amount, r.expires_at;
        RETURN;
    END IF;

    IF old_st <> 0 THEN
        UPDATE redemption AS x
           SET status         = new_st,
               confirmed_at   = CASE WHEN new_st = 2 THEN p_now ELSE x.confirmed_at END,
               released_at    = CASE WHEN new_st = 3 THEN p_now ELSE x.released_at END,
               release_reason = CASE WHEN new_st = 3 THEN COALESCE(p_reason, 'CANCELLED') END
         WHERE x.voucher_code = p_code AND x.order_id = p_order
        RETURNING x.* INTO r;
    END IF;

    -- Counters: the change in activeness moves `used` (slot) and `active` (customer); a change
    -- into or out of confirmed moves the slot's `confirmed`; a revocation slot 0's `revoked`.
    IF old_st IN (0, 3) AND new_st IN (1, 2) THEN
        -- Per-customer first: that row is private to one customer, so contention stays off the
        -- slots, which are touched last and held only until commit.
        INSERT INTO voucher_customer AS c (voucher_code, customer_id, active)
        VALUES (p_code, r.customer_id, 1)
        ON CONFLICT (voucher_code, customer_id)
        DO UPDATE SET active = c.active + 1 WHERE c.active < v_per;
        IF NOT FOUND THEN
            refusal := 'ALREADY_USED';
        ELSE
            -- Start from a slot chosen by the order, so concurrent winners spread out.
            taken := fg_take_slot(p_code, abs(hashtext(p_order) % v_slots), v_slots);
            IF taken IS NULL THEN
                refusal := 'OUT_OF_STOCK';
                UPDATE voucher_customer c SET active = c.active - 1
                 WHERE c.voucher_code = p_code AND c.customer_id = r.customer_id;
            ELSE
                -- The budget last (lock order), read after the slot's lock: a budget added
                -- meanwhile (under every slot's lock) is seen. A discount that does not fit
                -- gives back the slot's use and the customer's.
                UPDATE voucher_budget b SET used = b.used + r.discount_amount
                 WHERE b.voucher_code = p_code
                   AND (b.amount IS NULL OR b.used + r.discount_amount <= b.amount);
                budgeted := FOUND;
                IF NOT FOUND
                   AND EXISTS (SELECT 1 FROM voucher_budget b WHERE b.voucher_code = p_code) THEN
                    refusal := 'BUDGET_EXHAUSTED';
                END IF;
                -- A campaign's code: the campaign's counters after the code's own (lock
                -- order), the customer's over the campaign, then the campaign's uses and money.
                IF refusal IS NULL AND v_camp IS NOT NULL THEN
                    SELECT g.per_user_limit INTO v_cper FROM campaign g WHERE g.id = v_camp;
                    INSERT INTO campaign_customer AS c (campaign_id, customer_id, active)
                    VALUES (v_camp, r.customer_id, 1)
                    ON CONFLICT (campaign_id, customer_id)
                    DO UPDATE SET active = c.active + 1 WHERE v_cper IS NULL OR c.active < v_cper;
                    IF NOT FOUND THEN
                        refusal := 'ALREADY_USED';
                    ELSE
                        UPDATE campaign_counter k
                           SET used = k.used + 1, budget_used = k.budget_used + r.discount_amount
                         WHERE k.campaign_id = v_camp
                           AND (k.total_limit IS NULL OR k.used < k.total_limit)
                           AND (k.budget_amount IS NULL
                                OR k.budget_used + r.discount_amount <= k.budget_amount);
                        IF NOT FOUND THEN
                            SELECT CASE WHEN k.used >= k.total_limit THEN 'OUT_OF_STOCK'
                                        ELSE 'BUDGET_EXHAUSTED' END INTO refusal
                              FROM campaign_counter k WHERE k.campaign_id = v_camp;
                            UPDATE campaign_customer c SET active = c.active - 1
                             WHERE c.campaign_id = v_camp AND c.customer_id = r.customer_id;
                        END IF;
                    END IF;
                END IF;
                -- Refused after the slot: give back what was taken, in the same order.
                IF refusal IS NOT NULL THEN
                    UPDATE voucher_slot s SET used = s.used - 1
                     WHERE s.voucher_code = p_code AND s.slot = taken;
                    IF budgeted THEN
                        UPDATE voucher_budget b SET used = b.used - r.discount_amount
                         WHERE b.voucher_code = p_code;
                    END IF;
                    UPDATE voucher_customer c SET active = c.active - 1
                     WHERE c.voucher_code = p_code AND c.customer_id = r.customer_id;
                END IF;
                IF refusal IS NULL THEN
                    UPDATE redemption AS x SET slot = taken
                     WHERE x.voucher_code = p_code AND x.order_id = p_order
                    RETURNING x.* INTO r;
                    IF new_st = 2 THEN
                        UPDATE voucher_slot s SET confirmed = s.confirmed + 1
                         WHERE s.voucher_code = p_code AND s.slot = taken;
                    END IF;
                END IF;
            END IF;
        END IF;

        IF refusal IS NOT NULL THEN
            IF NOT p_revoke THEN
                RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = refusal;
            END IF;
            UPDATE redemption AS x
               SET status = 3, released_at = p_now, release_reason = 'REVOKED'
             WHERE x.voucher_code = p_code AND x.order_id = p_order
            RETURNING x.* INTO r;
            -- A revocation holds no slot; slot 0, which every voucher has, counts them.
            UPDATE voucher_slot s SET revoked = s.revoked + 1
             WHERE s.voucher_code = p_code AND s.slot = 0;
            RETURN QUERY SELECT 'REVOKED'::TEXT, r.customer_id, r.status, r.discount_amount, r.expires_at;
            RETURN;
        END IF;
    ELSIF old_st = 1 AND new_st = 2 THEN
        UPDATE voucher_slot s SET confirmed = s.confirmed + 1
         WHERE s.voucher_code = p_code AND s.slot = r.slot;
    ELSIF old_st IN (1, 2) AND new_st = 3 THEN
        UPDATE voucher_customer c SET active = c.active - 1
         WHERE c.voucher_code = p_code AND c.customer_id = r.customer_id;
        UPDATE voucher_slot s
           SET used = s.used - 1,
               confirmed = s.confirmed - CASE WHEN old_st = 2 THEN 1 ELSE 0 END
         WHERE s.voucher_code = p_code AND s.slot = r.slot;
        UPDATE voucher_budget b SET used = b.used - r.discount_amount
         WHERE b.voucher_code = p_code;
        IF v_camp IS NOT NULL THEN
            UPDATE campaign_customer c SET active = c.active - 1
             WHERE c.campaign_id = v_camp AND c.customer_id = r.customer_id;
            UPDATE campaign_counter k
               SET used = k.used - 1, budget_used = k.budget_used - r.discount_amount
             WHERE k.campaign_id = v_camp;
        END IF;
    END IF;

    RETURN QUERY SELECT 'APPLIED'::TEXT, r.customer_id, r.status, r.discount_amount, r.expires_at;
END;
$$;

-- The set-based paths (V14) do not know campaigns: a batch that touches a campaign's code
-- goes to the loop of fg_merge / fg_reserve calls, which does (FG422, as for every batch the
-- set-based path does not take). The bodies are V16's, renamed; the names the service calls
-- check first.
ALTER FUNCTION fg_merge_strict(TEXT[], TEXT[], BIGINT[], SMALLINT[], BIGINT[], BIGINT[],
                               TIMESTAMPTZ[], TIMESTAMPTZ[], TEXT[], TIMESTAMPTZ[], BOOLEAN[])
    RENAME TO fg_merge_strict_single;
ALTER FUNCTION fg_reserve_strict(TEXT[], TEXT[], BIGINT[], BIGINT[], TIMESTAMPTZ[])
    RENAME TO fg_reserve_strict_single;

-- Whether any of these codes is a campaign's.
CREATE FUNCTION fg_any_campaign_code(p_codes TEXT[]) RETURNS BOOLEAN
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM voucher v
                    WHERE v.code = ANY (p_codes) AND v.campaign_id IS NOT NULL);
$$;

CREATE FUNCTION fg_merge_strict(p_codes TEXT[], p_orders TEXT[], p_customers BIGINT[],
                                p_statuses SMALLINT[], p_order_amounts BIGINT[],
                                p_discounts BIGINT[], p_reserved_at TIMESTAMPTZ[],
                                p_expires_at TIMESTAMPTZ[], p_reasons TEXT[],
                                p_now TIMESTAMPTZ[], p_revoke BOOLEAN[])
RETURNS TABLE(idx INT, outcome TEXT, customer_id BIGINT, status SMALLINT,
              discount_amount BIGINT, expires_at TIMESTAMPTZ, flash_sale BOOLEAN,
              error_code TEXT, error_message TEXT)
LANGUAGE plpgsql AS $$
BEGIN
    IF fg_any_campaign_code(p_codes) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'a campaign''s code in the batch';
    END IF;
    RETURN QUERY SELECT * FROM fg_merge_strict_single(p_codes, p_orders, p_customers, p_statuses,
                                                      p_order_amounts, p_discounts, p_reserved_at,
                                                      p_expires_at, p_reasons, p_now, p_revoke);
END;
$$;

CREATE FUNCTION fg_reserve_strict(p_codes TEXT[], p_orders TEXT[], p_customers BIGINT[],
                                  p_order_amounts BIGINT[], p_now TIMESTAMPTZ[])
RETURNS TABLE(idx INT, outcome TEXT, customer_id BIGINT, status SMALLINT,
              discount_amount BIGINT, expires_at TIMESTAMPTZ, error_code TEXT,
              error_message TEXT)
LANGUAGE plpgsql AS $$
BEGIN
    IF fg_any_campaign_code(p_codes) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'a campaign''s code in the batch';
    END IF;
    RETURN QUERY SELECT * FROM fg_reserve_strict_single(p_codes, p_orders, p_customers,
                                                        p_order_amounts, p_now);
END;
$$;

-- fg_patch_campaign: pause, window, limits and budget of a campaign, in one transaction under
-- the campaign counter's lock (the lock every winner takes last): a total or budget below what
-- is held is refused and nothing is written, as is a window that would end before it starts.
-- perUserLimit may go below what a customer holds: they keep it, and take no more. A NULL p_*
-- keeps the value; p_clear_* removes a limit.
CREATE FUNCTION fg_patch_campaign(p_id BIGINT, p_active BOOLEAN, p_starts_at TIMESTAMPTZ,
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
       SET active = COALESCE(p_active, g.active),
           starts_at = COALESCE(p_starts_at, g.starts_at),
           ends_at = COALESCE(p_ends_at, g.ends_at),
           per_user_limit = CASE WHEN p_clear_per_user THEN NULL
                                 ELSE COALESCE(p_per_user_limit, g.per_user_limit) END
     WHERE g.id = p_id;
    RETURN 'APPLIED';
END;
$$;
