-- The schema migrations/ and sql/functions/ leave: written by scripts/schema.sh, do not edit.
--
-- PostgreSQL database dump
--

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: fg_change; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.fg_change AS (
	idx integer,
	code text,
	order_id text,
	customer_id bigint,
	status smallint,
	order_amount bigint,
	discount bigint,
	reserved_at timestamp with time zone,
	expires_at timestamp with time zone,
	reason text,
	now timestamp with time zone,
	revoke boolean,
	kind text,
	old_status smallint,
	row_customer bigint,
	row_discount bigint,
	row_expires timestamp with time zone,
	row_slot smallint,
	flash_sale boolean,
	candidate boolean,
	slot smallint
);

--
-- Name: fg_campaign_budget_unused(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_campaign_budget_unused() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.budget_used := 0;
    RETURN NEW;
END;
$$;

--
-- Name: fg_change_slots(text, smallint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_change_slots(p_code text, p_slots smallint) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_k   SMALLINT;
    held  RECORD;
BEGIN
    PERFORM 1 FROM voucher_slot s WHERE s.voucher_code = p_code ORDER BY s.slot FOR UPDATE;
    SELECT s.slot, s.used, s.revoked INTO held
      FROM voucher_slot s
     WHERE s.voucher_code = p_code AND s.slot >= p_slots
       AND (s.used > 0 OR s.confirmed > 0 OR s.revoked > 0)
     ORDER BY s.slot
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = 'SLOTS_IN_USE',
              DETAIL = format('slot %s still holds %s uses', held.slot, held.used);
    END IF;
    SELECT x.counter_slots INTO v_k FROM voucher x WHERE x.code = p_code;
    DELETE FROM voucher_slot s WHERE s.voucher_code = p_code AND s.slot >= p_slots;
    INSERT INTO voucher_slot (voucher_code, slot, cap)
    SELECT p_code, s, 0 FROM generate_series(v_k, p_slots - 1) AS s;
    UPDATE voucher x SET counter_slots = p_slots WHERE x.code = p_code;
END;
$$;

--
-- Name: fg_check_slot_caps(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_check_slot_caps() RETURNS trigger
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

--
-- Name: fg_discount(bigint, bigint, smallint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_discount(p_amount bigint, p_fixed bigint, p_percent smallint, p_cap bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
    -- LEAST ignores a NULL cap.
    SELECT CASE WHEN p_percent IS NULL THEN LEAST(p_fixed, p_amount)
                ELSE LEAST(p_amount * p_percent / 100, p_cap) END;
$$;

--
-- Name: fg_expire(timestamp with time zone, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_expire(p_now timestamp with time zone, p_limit integer) RETURNS TABLE(voucher_code text, order_id text, customer_id bigint, flash_sale boolean)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    codes      TEXT[];
    orders     TEXT[];
    customers  BIGINT[];
    slots      SMALLINT[];
    n          INT;
BEGIN
    SELECT array_agg(d.voucher_code ORDER BY d.voucher_code, d.order_id),
           array_agg(d.order_id ORDER BY d.voucher_code, d.order_id),
           array_agg(d.customer_id ORDER BY d.voucher_code, d.order_id),
           array_agg(d.slot ORDER BY d.voucher_code, d.order_id)
      INTO codes, orders, customers, slots
      FROM (SELECT r.voucher_code, r.order_id, r.customer_id, r.slot
              FROM redemption r
             WHERE r.status = 1 AND r.expires_at < p_now
             ORDER BY r.expires_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) d;
    IF codes IS NULL THEN
        RETURN;
    END IF;

    PERFORM 1 FROM voucher_customer c
      JOIN (SELECT DISTINCT unnest(codes) AS code, unnest(customers) AS customer) k
        ON c.voucher_code = k.code AND c.customer_id = k.customer
     ORDER BY c.voucher_code, c.customer_id
       FOR UPDATE OF c;
    PERFORM 1 FROM voucher_slot s
      JOIN (SELECT DISTINCT unnest(codes) AS code, unnest(slots) AS slot) k
        ON s.voucher_code = k.code AND s.slot = k.slot
     ORDER BY s.voucher_code, s.slot
       FOR UPDATE OF s;

    n := array_length(codes, 1);
    RETURN QUERY
    SELECT codes[m.idx], orders[m.idx], customers[m.idx], m.flash_sale
      FROM fg_merge_set(codes, orders, array_fill(NULL::BIGINT, ARRAY[n]),
                        array_fill(3::SMALLINT, ARRAY[n]), array_fill(NULL::BIGINT, ARRAY[n]),
                        array_fill(NULL::BIGINT, ARRAY[n]), array_fill(NULL::TIMESTAMPTZ, ARRAY[n]),
                        array_fill(NULL::TIMESTAMPTZ, ARRAY[n]), array_fill('EXPIRED'::TEXT, ARRAY[n]),
                        array_fill(p_now, ARRAY[n]), array_fill(false, ARRAY[n])) m
     WHERE m.outcome = 'APPLIED'
     ORDER BY m.idx;
END;
$$;

--
-- Name: fg_forget_idle_campaign_customer(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_forget_idle_campaign_customer() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM campaign_customer c
     WHERE c.campaign_id = NEW.campaign_id AND c.customer_id = NEW.customer_id
       AND c.active = 0;
    RETURN NULL;
END;
$$;

--
-- Name: fg_forget_idle_customer(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_forget_idle_customer() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM voucher_customer c
     WHERE c.voucher_code = NEW.voucher_code AND c.customer_id = NEW.customer_id
       AND c.active = 0;
    RETURN NULL;
END;
$$;

--
-- Name: fg_merge(text, text, bigint, smallint, bigint, bigint, timestamp with time zone, timestamp with time zone, text, timestamp with time zone, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_merge(p_code text, p_order text, p_customer bigint, p_status smallint, p_order_amount bigint, p_discount bigint, p_reserved_at timestamp with time zone, p_expires_at timestamp with time zone, p_reason text, p_now timestamp with time zone, p_revoke boolean) RETURNS TABLE(outcome text, customer_id bigint, status smallint, discount_amount bigint, expires_at timestamp with time zone)
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

--
-- Name: fg_merge_batch(text[], text[], bigint[], smallint[], bigint[], bigint[], timestamp with time zone[], timestamp with time zone[], text[], timestamp with time zone[], boolean[], boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_merge_batch(p_codes text[], p_orders text[], p_customers bigint[], p_statuses smallint[], p_order_amounts bigint[], p_discounts bigint[], p_reserved_at timestamp with time zone[], p_expires_at timestamp with time zone[], p_reasons text[], p_now timestamp with time zone[], p_revoke boolean[], p_isolate boolean) RETURNS TABLE(idx integer, outcome text, customer_id bigint, status smallint, discount_amount bigint, expires_at timestamp with time zone, flash_sale boolean, error_code text, error_message text)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    m          RECORD;
    last_code  TEXT;
    last_flash BOOLEAN;
BEGIN
    FOR i IN 1 .. COALESCE(array_length(p_codes, 1), 0) LOOP
        idx := i;
        outcome := NULL; customer_id := NULL; status := NULL; discount_amount := NULL;
        expires_at := NULL; flash_sale := NULL; error_code := NULL; error_message := NULL;
        IF p_isolate THEN
            BEGIN
                SELECT * INTO m FROM fg_merge(p_codes[i], p_orders[i], p_customers[i],
                                              p_statuses[i], p_order_amounts[i], p_discounts[i],
                                              p_reserved_at[i], p_expires_at[i], p_reasons[i],
                                              p_now[i], p_revoke[i]);
            EXCEPTION WHEN OTHERS THEN
                error_code := SQLSTATE;
                error_message := SQLERRM;
            END;
        ELSE
            SELECT * INTO m FROM fg_merge(p_codes[i], p_orders[i], p_customers[i],
                                          p_statuses[i], p_order_amounts[i], p_discounts[i],
                                          p_reserved_at[i], p_expires_at[i], p_reasons[i],
                                          p_now[i], p_revoke[i]);
        END IF;
        IF error_code IS NULL THEN
            outcome := m.outcome;
            customer_id := m.customer_id;
            status := m.status;
            discount_amount := m.discount_amount;
            expires_at := m.expires_at;
            -- A batch is mostly one voucher's: read its kind once.
            IF last_code IS DISTINCT FROM p_codes[i] THEN
                last_code := p_codes[i];
                last_flash := (SELECT v.flash_sale FROM voucher v WHERE v.code = last_code);
            END IF;
            flash_sale := last_flash;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;

--
-- Name: fg_merge_set(text[], text[], bigint[], smallint[], bigint[], bigint[], timestamp with time zone[], timestamp with time zone[], text[], timestamp with time zone[], boolean[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_merge_set(p_codes text[], p_orders text[], p_customers bigint[], p_statuses smallint[], p_order_amounts bigint[], p_discounts bigint[], p_reserved_at timestamp with time zone[], p_expires_at timestamp with time zone[], p_reasons text[], p_now timestamp with time zone[], p_revoke boolean[]) RETURNS TABLE(idx integer, outcome text, customer_id bigint, status smallint, discount_amount bigint, expires_at timestamp with time zone, flash_sale boolean, error_code text, error_message text)
    LANGUAGE plpgsql
    AS $$
BEGIN
    BEGIN
        RETURN QUERY SELECT * FROM fg_merge_strict(p_codes, p_orders, p_customers, p_statuses,
                                                   p_order_amounts, p_discounts, p_reserved_at,
                                                   p_expires_at, p_reasons, p_now, p_revoke);
        RETURN;
    EXCEPTION WHEN OTHERS THEN
        -- Everything the set-based path wrote is rolled back with its savepoint.
        NULL;
    END;
    RETURN QUERY SELECT * FROM fg_merge_batch(p_codes, p_orders, p_customers, p_statuses,
                                              p_order_amounts, p_discounts, p_reserved_at,
                                              p_expires_at, p_reasons, p_now, p_revoke, true);
END;
$$;

--
-- Name: fg_merge_strict(text[], text[], bigint[], smallint[], bigint[], bigint[], timestamp with time zone[], timestamp with time zone[], text[], timestamp with time zone[], boolean[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_merge_strict(p_codes text[], p_orders text[], p_customers bigint[], p_statuses smallint[], p_order_amounts bigint[], p_discounts bigint[], p_reserved_at timestamp with time zone[], p_expires_at timestamp with time zone[], p_reasons text[], p_now timestamp with time zone[], p_revoke boolean[]) RETURNS TABLE(idx integer, outcome text, customer_id bigint, status smallint, discount_amount bigint, expires_at timestamp with time zone, flash_sale boolean, error_code text, error_message text)
    LANGUAGE plpgsql
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    n          INT := COALESCE(array_length(p_codes, 1), 0);
    changes    fg_change[];
    want       RECORD;
    pool_code  TEXT[] := '{}';
    pool_slot  SMALLINT[] := '{}';
    pool_room  BIGINT[] := '{}';
    taken      SMALLINT[];
    rooms      BIGINT[];
    expected   INT;
    written    INT;
    b_codes    TEXT[];
    b_deltas   BIGINT[];
    g_camp     BIGINT[];
    g_customer BIGINT[];
    g_new      BOOLEAN[];
    g_money    BIGINT[];
    k_ids      BIGINT[];
    k_uses     BIGINT[];
    k_money    BIGINT[];
    k_back     BIGINT[];
    k_refund   BIGINT[];
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    -- Every change of a batch carries one key; a key twice means the changes depend on each
    -- other's order.
    IF (SELECT count(DISTINCT (k.code, k.order_id)) FROM unnest(p_codes, p_orders) k(code, order_id)) <> n THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'an order twice in the batch';
    END IF;

    -- The rows that exist, locked in key order, so that two batches never wait on each other
    -- in a circle; then the customers' counters the batch moves, in key order too.
    PERFORM 1 FROM redemption r
      JOIN unnest(p_codes, p_orders) k(code, order_id)
        ON r.voucher_code = k.code AND r.order_id = k.order_id
     ORDER BY r.voucher_code, r.order_id
       FOR UPDATE OF r;
    PERFORM 1 FROM voucher_customer c
      JOIN (SELECT DISTINCT k.code, COALESCE(k.customer, r.customer_id) AS customer
              FROM unnest(p_codes, p_orders, p_customers) k(code, order_id, customer)
              LEFT JOIN redemption r ON r.voucher_code = k.code AND r.order_id = k.order_id) k
        ON c.voucher_code = k.code AND c.customer_id = k.customer
     ORDER BY c.voucher_code, c.customer_id
       FOR UPDATE OF c;

    SELECT array_agg(q.ch ORDER BY (q.ch).idx) INTO changes
      FROM (SELECT ROW(
               i.idx::INT, i.code, i.order_id, i.customer, i.status, i.order_amount, i.discount,
               i.reserved_at, i.expires_at, i.reason, i.now, i.revoke,
               CASE WHEN v.code IS NULL OR i.status NOT IN (1, 2, 3)
                         OR (i.customer IS NOT NULL
                             AND i.expires_at > i.reserved_at + make_interval(secs => v.reservation_ttl_seconds))
                         THEN 'raise'
                    WHEN r.order_id IS NULL AND i.customer IS NULL THEN 'not_found'
                    WHEN r.order_id IS NULL AND i.status = 3 THEN 'new_released'
                    WHEN r.order_id IS NULL THEN 'new_use'
                    WHEN i.customer IS NOT NULL AND r.customer_id <> i.customer THEN 'conflict'
                    WHEN r.status >= i.status THEN 'unchanged'
                    WHEN i.status = 2 THEN 'confirm'
                    ELSE 'release' END,
               r.status, r.customer_id, r.discount_amount, r.expires_at, r.slot, v.flash_sale,
               -- This customer's k-th new use in the batch passes the limit while
               -- active + k <= limit (an earlier one refused for want of room leaves no room
               -- for a later one either).
               COALESCE(c.active, 0)
                 + count(*) FILTER (WHERE r.order_id IS NULL AND i.status IN (1, 2))
                     OVER (PARTITION BY i.code, i.customer ORDER BY i.idx)
                 <= v.per_user_limit,
               NULL)::fg_change AS ch
      FROM unnest(p_codes, p_orders, p_customers, p_statuses, p_order_amounts, p_discounts,
                  p_reserved_at, p_expires_at, p_reasons, p_now, p_revoke)
             WITH ORDINALITY AS i(code, order_id, customer, status, order_amount, discount,
                                  reserved_at, expires_at, reason, now, revoke, idx)
      LEFT JOIN voucher v ON v.code = i.code
      LEFT JOIN redemption r ON r.voucher_code = i.code AND r.order_id = i.order_id
      LEFT JOIN voucher_customer c ON c.voucher_code = i.code AND c.customer_id = i.customer) q;

    IF EXISTS (SELECT 1 FROM unnest(changes) c WHERE c.kind = 'raise') THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'a change fg_merge raises for';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(changes) c GROUP BY c.code
                HAVING bool_or(c.kind = 'new_use') AND bool_or(c.kind = 'release')) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'new and given-back uses of one voucher';
    END IF;

    -- Room for each voucher's candidates (fg_slot_room): when there is not enough, the room
    -- there is goes to the first candidates.
    FOR want IN SELECT c.code, count(*) AS wanted, min(c.order_id) AS first_order,
                    x.counter_slots AS k
               FROM unnest(changes) c JOIN voucher x ON x.code = c.code
              WHERE c.kind = 'new_use' AND c.candidate
              GROUP BY c.code, x.counter_slots
              ORDER BY c.code LOOP
        SELECT COALESCE(array_agg(r.slot ORDER BY r.ord), '{}'),
               COALESCE(array_agg(r.room ORDER BY r.ord), '{}')
          INTO taken, rooms
          FROM fg_slot_room(want.code, want.wanted, want.first_order, want.k)
                 WITH ORDINALITY r(slot, room, ord);
        pool_code := pool_code || array_fill(want.code, ARRAY[cardinality(taken)]);
        pool_slot := pool_slot || taken;
        pool_room := pool_room || rooms;
    END LOOP;

    -- The candidates, in arrival order, fill the pool's slots in turn.
    WITH pool AS (
        SELECT p.code, p.slot,
               sum(p.room) OVER (PARTITION BY p.code ORDER BY p.ord) - p.room AS before,
               sum(p.room) OVER (PARTITION BY p.code ORDER BY p.ord) AS upto
          FROM unnest(pool_code, pool_slot, pool_room) WITH ORDINALITY p(code, slot, room, ord)),
    wins AS (
        SELECT c.idx, row_number() OVER (PARTITION BY c.code ORDER BY c.idx) AS nth, c.code
          FROM unnest(changes) c
         WHERE c.kind = 'new_use' AND c.candidate)
    SELECT array_agg(ROW(c.idx, c.code, c.order_id, c.customer_id, c.status, c.order_amount,
                         c.discount, c.reserved_at, c.expires_at, c.reason, c.now, c.revoke,
                         c.kind, c.old_status, c.row_customer, c.row_discount, c.row_expires,
                         c.row_slot, c.flash_sale, c.candidate, p.slot)::fg_change ORDER BY c.idx)
      INTO changes
      FROM unnest(changes) c
      LEFT JOIN wins w ON w.idx = c.idx
      LEFT JOIN pool p ON p.code = w.code AND w.nth > p.before AND w.nth <= p.upto;

    -- A refused new use without p_revoke: fg_merge raises for it.
    IF EXISTS (SELECT 1 FROM unnest(changes) c
                WHERE c.kind = 'new_use' AND c.slot IS NULL AND NOT c.revoke) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = 'a new use refused';
    END IF;

    -- The writes. New rows: winners with their slot, refusals stored REVOKED, releases that
    -- came first. A key another transaction claimed since the look above raises.
    SELECT count(*) INTO expected FROM unnest(changes) c WHERE c.kind IN ('new_use', 'new_released');
    IF expected > 0 THEN
        INSERT INTO redemption (voucher_code, order_id, customer_id, status, order_amount,
                                discount_amount, reserved_at, expires_at, confirmed_at,
                                released_at, release_reason, slot)
        SELECT c.code, c.order_id, c.customer_id,
               CASE WHEN c.kind = 'new_use' AND c.slot IS NULL THEN 3 ELSE c.status END,
               c.order_amount, c.discount, c.reserved_at, c.expires_at,
               CASE WHEN c.status = 2 THEN c.now END,
               CASE WHEN c.status = 3 OR c.slot IS NULL AND c.kind = 'new_use' THEN c.now END,
               CASE WHEN c.kind = 'new_released' THEN COALESCE(c.reason, 'CANCELLED')
                    WHEN c.slot IS NULL THEN 'REVOKED' END,
               c.slot
          FROM unnest(changes) c
         WHERE c.kind IN ('new_use', 'new_released')
         ORDER BY c.code, c.order_id
        ON CONFLICT ON CONSTRAINT redemption_pkey DO NOTHING;
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written <> expected THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'an order claimed meanwhile';
        END IF;
    END IF;

    UPDATE redemption x
       SET status         = c.status,
           confirmed_at   = CASE WHEN c.status = 2 THEN c.now ELSE x.confirmed_at END,
           released_at    = CASE WHEN c.status = 3 THEN c.now ELSE x.released_at END,
           release_reason = CASE WHEN c.status = 3 THEN COALESCE(c.reason, 'CANCELLED') END
      FROM unnest(changes) c
     WHERE c.kind IN ('confirm', 'release')
       AND x.voucher_code = c.code AND x.order_id = c.order_id;

    -- Customers: each winner's +1, each given-back use's -1, summed per customer. The upsert
    -- checks the limit again: a counter a concurrent transaction created meanwhile raises.
    SELECT count(DISTINCT (c.code, c.customer_id)) INTO expected
      FROM unnest(changes) c WHERE c.kind = 'new_use' AND c.slot IS NOT NULL;
    IF expected > 0 THEN
        INSERT INTO voucher_customer AS vc (voucher_code, customer_id, active)
        SELECT c.code, c.customer_id, count(*)
          FROM unnest(changes) c
         WHERE c.kind = 'new_use' AND c.slot IS NOT NULL
         GROUP BY c.code, c.customer_id
         ORDER BY c.code, c.customer_id
        ON CONFLICT (voucher_code, customer_id) DO UPDATE SET active = vc.active + EXCLUDED.active
         WHERE vc.active + EXCLUDED.active
               <= (SELECT x.per_user_limit FROM voucher x WHERE x.code = vc.voucher_code);
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written <> expected THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'a customer counter moved meanwhile';
        END IF;
    END IF;
    UPDATE voucher_customer vc SET active = vc.active - d.n
      FROM (SELECT c.code, c.row_customer, count(*) AS n
              FROM unnest(changes) c WHERE c.kind = 'release' AND c.old_status IN (1, 2)
             GROUP BY c.code, c.row_customer) d
     WHERE vc.voucher_code = d.code AND vc.customer_id = d.row_customer;

    -- Slots: one UPDATE, each touched slot moved once by its sums. Those not yet locked (a
    -- confirm's, a release's, slot 0 for revocations) are locked first, in order.
    PERFORM 1 FROM voucher_slot x
      JOIN (SELECT DISTINCT c.code, CASE WHEN c.kind = 'new_use' AND c.slot IS NULL THEN 0::SMALLINT
                                         ELSE c.row_slot END AS slot
              FROM unnest(changes) c
             WHERE c.kind IN ('confirm', 'release') OR c.kind = 'new_use' AND c.slot IS NULL) d
        ON x.voucher_code = d.code AND x.slot = d.slot
     ORDER BY x.voucher_code, x.slot
       FOR UPDATE OF x;
    UPDATE voucher_slot x
       SET used = x.used + d.used, confirmed = x.confirmed + d.confirmed,
           revoked = x.revoked + d.revoked
      FROM (SELECT m.code, m.slot, sum(m.used) AS used, sum(m.confirmed) AS confirmed,
                   sum(m.revoked) AS revoked
              FROM (SELECT c.code,
                           CASE WHEN c.kind = 'new_use' THEN COALESCE(c.slot, 0::SMALLINT)
                                ELSE c.row_slot END AS slot,
                           CASE WHEN c.kind = 'new_use' AND c.slot IS NOT NULL THEN 1
                                WHEN c.kind = 'release' THEN -1 ELSE 0 END AS used,
                           CASE WHEN c.kind = 'new_use' AND c.slot IS NOT NULL AND c.status = 2 THEN 1
                                WHEN c.kind = 'confirm' THEN 1
                                WHEN c.kind = 'release' AND c.old_status = 2 THEN -1
                                ELSE 0 END AS confirmed,
                           CASE WHEN c.kind = 'new_use' AND c.slot IS NULL THEN 1 ELSE 0 END AS revoked
                      FROM unnest(changes) c
                     WHERE c.kind IN ('new_use', 'confirm', 'release')) m
             GROUP BY m.code, m.slot) d
     WHERE x.voucher_code = d.code AND x.slot = d.slot;

    -- Budgets, last (lock order): each budgeted voucher moved once, by its winners' discounts
    -- or by its given-back uses' (never both: see above). Winners that do not fit together
    -- depend on their order: the loop decides them.
    SELECT array_agg(d.code ORDER BY d.code), array_agg(d.delta ORDER BY d.code)
      INTO b_codes, b_deltas
      FROM (SELECT c.code,
                   sum(CASE WHEN c.kind = 'new_use' THEN c.discount ELSE -c.row_discount END) AS delta
              FROM unnest(changes) c
              JOIN voucher_budget b ON b.voucher_code = c.code
             WHERE c.kind = 'new_use' AND c.slot IS NOT NULL
                OR c.kind = 'release' AND c.old_status IN (1, 2)
             GROUP BY c.code) d;
    IF b_codes IS NOT NULL THEN
        PERFORM fg_move_budgets(b_codes, b_deltas);
    END IF;

    -- Campaigns' counters, last (lock order: code budget -> campaign customer -> campaign
    -- counter). The uses that move: new uses that won a slot, and given-back uses (a release or
    -- an expiry of a RESERVED or CONFIRMED row), each of a campaign's code. Each code is read by
    -- its key in a subquery the campaign test cannot reach (OFFSET 0): as a join, the planner
    -- picked the partial index of campaigns' codes and walked all of it for each change.
    SELECT array_agg(v.campaign_id ORDER BY c.idx),
           array_agg(CASE WHEN c.kind = 'new_use' THEN c.customer_id ELSE c.row_customer END
                     ORDER BY c.idx),
           array_agg(c.kind = 'new_use' ORDER BY c.idx),
           array_agg(CASE WHEN c.kind = 'new_use' THEN c.discount ELSE c.row_discount END
                     ORDER BY c.idx)
      INTO g_camp, g_customer, g_new, g_money
      FROM unnest(changes) c
     CROSS JOIN LATERAL (SELECT x.campaign_id FROM voucher x WHERE x.code = c.code OFFSET 0) v
     WHERE v.campaign_id IS NOT NULL
       AND (c.kind = 'new_use' AND c.slot IS NOT NULL
            OR c.kind = 'release' AND c.old_status IN (1, 2));
    IF g_camp IS NOT NULL THEN
        -- Each customer's counter over the campaign, those that exist locked in key order. The
        -- new uses must all fit under the per-user limit as if none were given back: then they
        -- fit in any order of the batch, and the loop would take them all too. Otherwise which
        -- of them the campaign refuses depends on the order: the loop decides.
        PERFORM 1 FROM campaign_customer cc
          JOIN (SELECT DISTINCT g.camp, g.customer
                  FROM unnest(g_camp, g_customer) g(camp, customer)) d
            ON cc.campaign_id = d.camp AND cc.customer_id = d.customer
         ORDER BY cc.campaign_id, cc.customer_id
           FOR UPDATE OF cc;
        IF EXISTS (SELECT 1
                     FROM (SELECT g.camp, g.customer, count(*) AS n
                             FROM unnest(g_camp, g_customer, g_new) g(camp, customer, new)
                            WHERE g.new
                            GROUP BY g.camp, g.customer) d
                     JOIN campaign p ON p.id = d.camp
                    WHERE COALESCE((SELECT cc.active FROM campaign_customer cc
                                     WHERE cc.campaign_id = d.camp
                                       AND cc.customer_id = d.customer), 0) + d.n
                          > p.per_user_limit) THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422',
                MESSAGE = 'new uses past a campaign''s per-user limit together';
        END IF;
        -- The new uses' +1s. The upsert checks the limit again: a counter a concurrent
        -- transaction created meanwhile raises.
        SELECT count(DISTINCT (g.camp, g.customer)) INTO expected
          FROM unnest(g_camp, g_customer, g_new) g(camp, customer, new) WHERE g.new;
        IF expected > 0 THEN
            INSERT INTO campaign_customer AS cc (campaign_id, customer_id, active)
            SELECT g.camp, g.customer, count(*)
              FROM unnest(g_camp, g_customer, g_new) g(camp, customer, new)
             WHERE g.new
             GROUP BY g.camp, g.customer
             ORDER BY g.camp, g.customer
            ON CONFLICT (campaign_id, customer_id) DO UPDATE SET active = cc.active + EXCLUDED.active
             WHERE cc.active + EXCLUDED.active
                   <= COALESCE((SELECT p.per_user_limit FROM campaign p WHERE p.id = cc.campaign_id),
                               cc.active + EXCLUDED.active);
            GET DIAGNOSTICS written = ROW_COUNT;
            IF written <> expected THEN
                RAISE EXCEPTION USING ERRCODE = 'FG422',
                    MESSAGE = 'a campaign''s customer counter moved meanwhile';
            END IF;
        END IF;
        -- The given-back uses' -1s.
        UPDATE campaign_customer cc SET active = cc.active - d.n
          FROM (SELECT g.camp, g.customer, count(*) AS n
                  FROM unnest(g_camp, g_customer, g_new) g(camp, customer, new)
                 WHERE NOT g.new
                 GROUP BY g.camp, g.customer) d
         WHERE cc.campaign_id = d.camp AND cc.customer_id = d.customer;

        -- Each campaign's counter, last: its new uses and their discounts must fit as if
        -- nothing were given back (as above), then it moves once by both.
        SELECT array_agg(d.camp ORDER BY d.camp), array_agg(d.n ORDER BY d.camp),
               array_agg(d.money ORDER BY d.camp), array_agg(d.back ORDER BY d.camp),
               array_agg(d.refund ORDER BY d.camp)
          INTO k_ids, k_uses, k_money, k_back, k_refund
          FROM (SELECT g.camp, count(*) FILTER (WHERE g.new) AS n,
                       COALESCE(sum(g.money) FILTER (WHERE g.new), 0) AS money,
                       count(*) FILTER (WHERE NOT g.new) AS back,
                       COALESCE(sum(g.money) FILTER (WHERE NOT g.new), 0) AS refund
                  FROM unnest(g_camp, g_new, g_money) g(camp, new, money)
                 GROUP BY g.camp) d;
        PERFORM 1 FROM campaign_counter k WHERE k.campaign_id = ANY (k_ids)
         ORDER BY k.campaign_id
           FOR UPDATE;
        IF EXISTS (SELECT 1 FROM campaign_counter k
                     JOIN unnest(k_ids, k_uses, k_money) d(camp, n, money) ON k.campaign_id = d.camp
                    WHERE d.n > 0
                      AND (k.used + d.n > k.total_limit
                           OR k.budget_used + d.money > k.budget_amount)) THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422',
                MESSAGE = 'new uses past a campaign''s total or budget together';
        END IF;
        UPDATE campaign_counter k
           SET used = k.used + d.n - d.back, budget_used = k.budget_used + d.money - d.refund
          FROM unnest(k_ids, k_uses, k_money, k_back, k_refund) d(camp, n, money, back, refund)
         WHERE k.campaign_id = d.camp;
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written <> cardinality(k_ids) THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'a campaign without its counter';
        END IF;
    END IF;

    RETURN QUERY
    SELECT c.idx,
           CASE c.kind WHEN 'not_found' THEN 'NOT_FOUND'
                       WHEN 'conflict' THEN 'ORDER_CONFLICT'
                       WHEN 'unchanged' THEN 'UNCHANGED'
                       WHEN 'new_use' THEN CASE WHEN c.slot IS NULL THEN 'REVOKED' ELSE 'APPLIED' END
                       ELSE 'APPLIED' END,
           CASE WHEN c.kind = 'not_found' THEN NULL
                WHEN c.kind IN ('new_use', 'new_released') THEN c.customer_id
                ELSE c.row_customer END,
           CASE WHEN c.kind = 'not_found' THEN NULL
                WHEN c.kind IN ('conflict', 'unchanged') THEN c.old_status
                WHEN c.kind = 'new_use' AND c.slot IS NULL THEN 3::SMALLINT
                ELSE c.status END,
           CASE WHEN c.kind = 'not_found' THEN NULL
                WHEN c.kind IN ('new_use', 'new_released') THEN c.discount
                ELSE c.row_discount END,
           CASE WHEN c.kind = 'not_found' THEN NULL
                WHEN c.kind IN ('new_use', 'new_released') THEN c.expires_at
                ELSE c.row_expires END,
           c.flash_sale, NULL::TEXT, NULL::TEXT
      FROM unnest(changes) c
     ORDER BY c.idx;
END;
$$;

--
-- Name: fg_merge_winners(text[], text[], bigint[], bigint[], bigint[], timestamp with time zone[], timestamp with time zone[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_merge_winners(p_codes text[], p_orders text[], p_customers bigint[], p_order_amounts bigint[], p_discounts bigint[], p_reserved_at timestamp with time zone[], p_expires_at timestamp with time zone[]) RETURNS TABLE(idx integer, outcome text, customer_id bigint, status smallint, discount_amount bigint, expires_at timestamp with time zone, flash_sale boolean, error_code text, error_message text)
    LANGUAGE plpgsql
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    SET enable_seqscan TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
#variable_conflict use_column
DECLARE
    n         INT := COALESCE(array_length(p_codes, 1), 0);
    want      RECORD;
    pool_code TEXT[] := '{}';
    pool_slot SMALLINT[] := '{}';
    pool_room BIGINT[] := '{}';
    taken     SMALLINT[];
    rooms     BIGINT[];
    written   INT;
    expected  INT;
    b_codes   TEXT[];
    b_deltas  BIGINT[];
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    IF (SELECT count(DISTINCT (k.code, k.order_id)) FROM unnest(p_codes, p_orders) k(code, order_id)) <> n THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'an order twice in the batch';
    END IF;
    -- Only vouchers of their own, each change within its voucher's reservation TTL, and each
    -- customer's new uses within the per-user limit counted from the batch alone (the upsert
    -- below checks the counters that exist).
    IF EXISTS (SELECT 1
                 FROM unnest(p_codes, p_customers, p_reserved_at, p_expires_at)
                        i(code, customer, reserved_at, expires_at)
                 LEFT JOIN voucher v ON v.code = i.code
                WHERE v.code IS NULL OR v.campaign_id IS NOT NULL OR i.customer IS NULL
                   OR i.expires_at > i.reserved_at + make_interval(secs => v.reservation_ttl_seconds))
       OR EXISTS (SELECT 1
                    FROM unnest(p_codes, p_customers) i(code, customer)
                    JOIN voucher v ON v.code = i.code
                   GROUP BY i.code, i.customer, v.per_user_limit
                  HAVING count(*) > v.per_user_limit) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'not a batch of plain winners';
    END IF;

    -- The customers' counters first, as fg_merge_strict locks them before the slots: two
    -- batches then never wait on each other's locks in a circle.
    SELECT count(DISTINCT (i.code, i.customer)) INTO expected
      FROM unnest(p_codes, p_customers) i(code, customer);
    INSERT INTO voucher_customer AS vc (voucher_code, customer_id, active)
    SELECT i.code, i.customer, count(*)
      FROM unnest(p_codes, p_customers) i(code, customer)
     GROUP BY i.code, i.customer
     ORDER BY i.code, i.customer
    ON CONFLICT (voucher_code, customer_id) DO UPDATE SET active = vc.active + EXCLUDED.active
     WHERE vc.active + EXCLUDED.active
           <= (SELECT x.per_user_limit FROM voucher x WHERE x.code = vc.voucher_code);
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written <> expected THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'a customer past the per-user limit';
    END IF;

    -- Room for every winner (fg_slot_room), or the batch is not plain.
    FOR want IN SELECT i.code, count(*) AS wanted, min(i.order_id) AS first_order,
                       x.counter_slots AS k
                  FROM unnest(p_codes, p_orders) i(code, order_id)
                  JOIN voucher x ON x.code = i.code
                 GROUP BY i.code, x.counter_slots
                 ORDER BY i.code LOOP
        SELECT COALESCE(array_agg(r.slot ORDER BY r.ord), '{}'),
               COALESCE(array_agg(r.room ORDER BY r.ord), '{}')
          INTO taken, rooms
          FROM fg_slot_room(want.code, want.wanted, want.first_order, want.k)
                 WITH ORDINALITY r(slot, room, ord);
        IF COALESCE((SELECT sum(r) FROM unnest(rooms) r), 0) < want.wanted THEN
            RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'not room for every winner';
        END IF;
        pool_code := pool_code || array_fill(want.code, ARRAY[cardinality(taken)]);
        pool_slot := pool_slot || taken;
        pool_room := pool_room || rooms;
    END LOOP;

    -- The rows, each winner in arrival order filling the pool's slots in turn. A key that exists
    -- (a retry whose first write landed) raises: fg_merge_strict answers it.
    WITH pool AS (
        SELECT p.code, p.slot,
               sum(p.room) OVER (PARTITION BY p.code ORDER BY p.ord) - p.room AS before,
               sum(p.room) OVER (PARTITION BY p.code ORDER BY p.ord) AS upto
          FROM unnest(pool_code, pool_slot, pool_room) WITH ORDINALITY p(code, slot, room, ord)),
    wins AS (
        SELECT i.*, row_number() OVER (PARTITION BY i.code ORDER BY i.idx) AS nth
          FROM unnest(p_codes, p_orders, p_customers, p_order_amounts, p_discounts,
                      p_reserved_at, p_expires_at)
                 WITH ORDINALITY AS i(code, order_id, customer, order_amount, discount,
                                      reserved_at, expires_at, idx))
    INSERT INTO redemption (voucher_code, order_id, customer_id, status, order_amount,
                            discount_amount, reserved_at, expires_at, slot)
    SELECT w.code, w.order_id, w.customer, 1, w.order_amount, w.discount, w.reserved_at,
           w.expires_at, p.slot
      FROM wins w
      JOIN pool p ON p.code = w.code AND w.nth > p.before AND w.nth <= p.upto
     ORDER BY w.code, w.order_id
    ON CONFLICT ON CONSTRAINT redemption_pkey DO NOTHING;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written <> n THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'an order already written';
    END IF;

    -- Each slot once, by the winners it took (locked above).
    UPDATE voucher_slot x SET used = x.used + d.used
      FROM (SELECT p.code, p.slot,
                   least(p.room, greatest(0, w.wanted - (sum(p.room) OVER (PARTITION BY p.code ORDER BY p.ord) - p.room))) AS used
              FROM unnest(pool_code, pool_slot, pool_room) WITH ORDINALITY p(code, slot, room, ord)
              JOIN (SELECT i.code, count(*) AS wanted FROM unnest(p_codes) i(code) GROUP BY i.code) w
                ON w.code = p.code) d
     WHERE x.voucher_code = d.code AND x.slot = d.slot AND d.used > 0;

    -- Budgets, as fg_merge_strict moves them.
    SELECT array_agg(d.code ORDER BY d.code), array_agg(d.delta ORDER BY d.code)
      INTO b_codes, b_deltas
      FROM (SELECT i.code, sum(i.discount) AS delta
              FROM unnest(p_codes, p_discounts) i(code, discount)
              JOIN voucher_budget b ON b.voucher_code = i.code
             GROUP BY i.code) d;
    IF b_codes IS NOT NULL THEN
        PERFORM fg_move_budgets(b_codes, b_deltas);
    END IF;

    RETURN QUERY
    SELECT i.idx::INT, 'APPLIED'::TEXT, i.customer, 1::SMALLINT, i.discount, i.expires_at,
           v.flash_sale, NULL::TEXT, NULL::TEXT
      FROM unnest(p_codes, p_customers, p_discounts, p_expires_at)
             WITH ORDINALITY AS i(code, customer, discount, expires_at, idx)
      JOIN voucher v ON v.code = i.code
     ORDER BY i.idx;
END;
$$;

--
-- Name: fg_move_budgets(text[], bigint[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_move_budgets(p_codes text[], p_deltas bigint[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM 1 FROM voucher_budget b WHERE b.voucher_code = ANY (p_codes)
     ORDER BY b.voucher_code
       FOR UPDATE;
    IF EXISTS (SELECT 1 FROM voucher_budget b
                 JOIN unnest(p_codes, p_deltas) d(code, delta) ON b.voucher_code = d.code
                WHERE b.amount IS NOT NULL AND b.used + d.delta > b.amount) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'new uses past the budget together';
    END IF;
    UPDATE voucher_budget b SET used = b.used + d.delta
      FROM unnest(p_codes, p_deltas) d(code, delta)
     WHERE b.voucher_code = d.code;
END;
$$;

--
-- Name: fg_patch_campaign(bigint, boolean, timestamp with time zone, timestamp with time zone, bigint, boolean, integer, boolean, bigint, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_patch_campaign(p_id bigint, p_active boolean, p_starts_at timestamp with time zone, p_ends_at timestamp with time zone, p_total_limit bigint, p_clear_total boolean, p_per_user_limit integer, p_clear_per_user boolean, p_budget_amount bigint, p_clear_budget boolean) RETURNS text
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

--
-- Name: fg_patch_voucher(text, bigint, bigint, smallint, bigint, bigint, integer, integer, timestamp with time zone, timestamp with time zone, boolean, smallint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_patch_voucher(p_code text, p_version bigint, p_discount_amount bigint, p_discount_percent smallint, p_max_discount bigint, p_min_order_amount bigint, p_total_limit integer, p_per_user_limit integer, p_starts_at timestamp with time zone, p_ends_at timestamp with time zone, p_active boolean, p_counter_slots smallint, p_budget_amount bigint) RETURNS TABLE(outcome text, version bigint)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    v     RECORD;
    bud   RECORD;
    held  BIGINT;
BEGIN
    SELECT x.version, x.total_limit, x.counter_slots INTO v
      FROM voucher x WHERE x.code = p_code FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'NOT_FOUND'::TEXT, NULL::BIGINT;
        RETURN;
    END IF;
    IF v.version <> p_version THEN
        RETURN QUERY SELECT 'STALE'::TEXT, v.version;
        RETURN;
    END IF;
    IF p_counter_slots IS NOT NULL AND p_counter_slots <> v.counter_slots THEN
        PERFORM fg_change_slots(p_code, p_counter_slots);
        PERFORM fg_resize_slots(p_code, p_total_limit);
    ELSIF p_total_limit <> v.total_limit THEN
        PERFORM fg_resize_slots(p_code, p_total_limit);
    END IF;
    SELECT b.amount, b.used INTO bud FROM voucher_budget b WHERE b.voucher_code = p_code FOR UPDATE;
    IF FOUND THEN
        IF p_budget_amount < bud.used THEN
            RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = 'BUDGET_BELOW_USED',
                  DETAIL = format('%s is held', bud.used);
        END IF;
        UPDATE voucher_budget b SET amount = p_budget_amount
         WHERE b.voucher_code = p_code AND b.amount IS DISTINCT FROM p_budget_amount;
    ELSIF p_budget_amount IS NOT NULL THEN
        PERFORM 1 FROM voucher_slot s WHERE s.voucher_code = p_code ORDER BY s.slot FOR UPDATE;
        SELECT COALESCE(sum(r.discount_amount), 0) INTO held
          FROM redemption r WHERE r.voucher_code = p_code AND r.status IN (1, 2);
        IF p_budget_amount < held THEN
            RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = 'BUDGET_BELOW_USED',
                  DETAIL = format('%s is held', held);
        END IF;
        INSERT INTO voucher_budget (voucher_code, amount, used) VALUES (p_code, p_budget_amount, held);
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

--
-- Name: fg_recover_orphan(text, text, bigint, bigint, bigint, timestamp with time zone, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_recover_orphan(p_code text, p_order text, p_customer bigint, p_order_amount bigint, p_discount bigint, p_reserved_at timestamp with time zone, p_expires_at timestamp with time zone, p_now timestamp with time zone) RETURNS TABLE(outcome text, customer_id bigint, status smallint, discount_amount bigint, expires_at timestamp with time zone)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    r     redemption%ROWTYPE;
    v_ttl INT;
BEGIN
    SELECT v.reservation_ttl_seconds INTO v_ttl FROM voucher v WHERE v.code = p_code;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fg_recover_orphan: unknown voucher %', p_code USING ERRCODE = 'FG404';
    END IF;
    IF p_expires_at > p_reserved_at + make_interval(secs => v_ttl) THEN
        RAISE EXCEPTION 'expiresAt is more than the voucher''s reservation TTL (% s) after reservedAt', v_ttl
              USING ERRCODE = 'check_violation';
    END IF;
    LOOP
        SELECT * INTO r FROM redemption
         WHERE redemption.voucher_code = p_code AND redemption.order_id = p_order
           FOR UPDATE;
        IF FOUND THEN
            IF r.status <> 1 THEN
                -- A confirm (or a release) got there first: it wins.
                RETURN QUERY SELECT 'UNCHANGED'::TEXT, r.customer_id, r.status,
                                    r.discount_amount, r.expires_at;
                RETURN;
            END IF;
            -- RESERVED, and locked by this transaction until it commits: no confirm can come in
            -- between, and fg_merge's RESERVED -> RELEASED gives the use back.
            RETURN QUERY SELECT * FROM fg_merge(p_code, p_order, p_customer, 3::SMALLINT,
                                                p_order_amount, p_discount, p_reserved_at,
                                                p_expires_at, 'EXPIRED', p_now, false);
            RETURN;
        END IF;
        -- No row: the tombstone claims the key. A writer that claims it first (a confirm, the
        -- late event) makes this insert do nothing, and the loop reads its row under its lock.
        INSERT INTO redemption AS x (voucher_code, order_id, customer_id, status, order_amount,
                                     discount_amount, reserved_at, expires_at, released_at,
                                     release_reason)
        VALUES (p_code, p_order, p_customer, 3, p_order_amount, p_discount, p_reserved_at,
                p_expires_at, p_now, 'EXPIRED')
        ON CONFLICT ON CONSTRAINT redemption_pkey DO NOTHING
        RETURNING x.* INTO r;
        IF FOUND THEN
            RETURN QUERY SELECT 'APPLIED'::TEXT, r.customer_id, r.status, r.discount_amount,
                                r.expires_at;
            RETURN;
        END IF;
    END LOOP;
END;
$$;

--
-- Name: fg_reserve(text, text, bigint, bigint, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_reserve(p_code text, p_order text, p_customer bigint, p_order_amount bigint, p_now timestamp with time zone) RETURNS TABLE(outcome text, customer_id bigint, status smallint, discount_amount bigint, expires_at timestamp with time zone)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    r  RECORD;
    e  RECORD;
    m  RECORD;
BEGIN
    SELECT x.customer_id, x.status, x.discount_amount, x.expires_at INTO r
      FROM redemption x WHERE x.voucher_code = p_code AND x.order_id = p_order;
    IF FOUND THEN
        RETURN QUERY SELECT
            CASE WHEN r.customer_id <> p_customer THEN 'ORDER_CONFLICT'
                 WHEN r.status = 3 THEN 'RESERVATION_RELEASED'
                 ELSE 'REPLAY' END,
            r.customer_id, r.status, r.discount_amount, r.expires_at;
        RETURN;
    END IF;
    SELECT * INTO e FROM fg_validate(p_code, p_customer, p_order_amount, p_now);
    IF e.outcome <> 'ELIGIBLE' THEN
        -- Each statement reads its own snapshot: a reserve of this very order may have
        -- committed between the look above and fg_validate's, and its use be what fg_validate
        -- refused for (ALREADY_USED, OUT_OF_STOCK). A retry answers as the first answer did.
        SELECT x.customer_id, x.status, x.discount_amount, x.expires_at INTO r
          FROM redemption x WHERE x.voucher_code = p_code AND x.order_id = p_order;
        IF FOUND THEN
            RETURN QUERY SELECT
                CASE WHEN r.customer_id <> p_customer THEN 'ORDER_CONFLICT'
                     WHEN r.status = 3 THEN 'RESERVATION_RELEASED'
                     ELSE 'REPLAY' END,
                r.customer_id, r.status, r.discount_amount, r.expires_at;
            RETURN;
        END IF;
        RETURN QUERY SELECT e.outcome, NULL::BIGINT, NULL::SMALLINT, NULL::BIGINT, NULL::TIMESTAMPTZ;
        RETURN;
    END IF;

    SELECT * INTO m FROM fg_merge(p_code, p_order, p_customer, 1::SMALLINT, p_order_amount,
                                  e.discount_amount, p_now,
                                  p_now + make_interval(secs => e.reservation_ttl_seconds),
                                  NULL, p_now, false);
    RETURN QUERY SELECT
        CASE m.outcome
            WHEN 'APPLIED' THEN 'RESERVED'
            WHEN 'UNCHANGED' THEN CASE WHEN m.status = 3 THEN 'RESERVATION_RELEASED' ELSE 'REPLAY' END
            ELSE m.outcome END,
        m.customer_id, m.status, m.discount_amount, m.expires_at;
END;
$$;

--
-- Name: fg_reserve_batch(text[], text[], bigint[], bigint[], timestamp with time zone[], boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_reserve_batch(p_codes text[], p_orders text[], p_customers bigint[], p_order_amounts bigint[], p_now timestamp with time zone[], p_isolate boolean) RETURNS TABLE(idx integer, outcome text, customer_id bigint, status smallint, discount_amount bigint, expires_at timestamp with time zone, error_code text, error_message text)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    m RECORD;
BEGIN
    FOR i IN 1 .. COALESCE(array_length(p_codes, 1), 0) LOOP
        idx := i;
        outcome := NULL; customer_id := NULL; status := NULL; discount_amount := NULL;
        expires_at := NULL; error_code := NULL; error_message := NULL;
        IF p_isolate THEN
            BEGIN
                SELECT * INTO m FROM fg_reserve(p_codes[i], p_orders[i], p_customers[i],
                                                p_order_amounts[i], p_now[i]);
            EXCEPTION WHEN OTHERS THEN
                error_code := SQLSTATE;
                error_message := SQLERRM;
            END;
        ELSE
            SELECT * INTO m FROM fg_reserve(p_codes[i], p_orders[i], p_customers[i],
                                            p_order_amounts[i], p_now[i]);
        END IF;
        IF error_code IS NULL THEN
            outcome := m.outcome;
            customer_id := m.customer_id;
            status := m.status;
            discount_amount := m.discount_amount;
            expires_at := m.expires_at;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;

--
-- Name: fg_reserve_strict(text[], text[], bigint[], bigint[], timestamp with time zone[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_reserve_strict(p_codes text[], p_orders text[], p_customers bigint[], p_order_amounts bigint[], p_now timestamp with time zone[]) RETURNS TABLE(idx integer, outcome text, customer_id bigint, status smallint, discount_amount bigint, expires_at timestamp with time zone, error_code text, error_message text)
    LANGUAGE plpgsql
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    SET enable_seqscan TO 'off'
    AS $$
#variable_conflict use_column
DECLARE
    a_idx       INT[];
    a_outcome   TEXT[];
    a_customer  BIGINT[];
    a_status    SMALLINT[];
    a_discount  BIGINT[];
    a_expires   TIMESTAMPTZ[];
    e_idx       INT[];
    e_codes     TEXT[];
    e_orders    TEXT[];
    e_customers BIGINT[];
    e_amounts   BIGINT[];
    e_discounts BIGINT[];
    e_now       TIMESTAMPTZ[];
    e_expires   TIMESTAMPTZ[];
BEGIN
    -- A new reserve of a campaign's code that the campaign, or its code row's copies of the
    -- campaign's pause and window, would refuse from this snapshot: the loop answers it as
    -- fg_validate does (a retry of a stored order is answered from its row, as for a voucher).
    IF EXISTS (
        SELECT 1
          FROM unnest(p_codes, p_orders, p_customers, p_order_amounts, p_now)
                 i(code, order_id, customer, order_amount, now)
          -- By the code's key, as in fg_merge_strict (OFFSET 0: no campaign test reaches it).
         CROSS JOIN LATERAL (SELECT x.* FROM voucher x WHERE x.code = i.code OFFSET 0) v
          JOIN campaign g ON g.id = v.campaign_id
          LEFT JOIN campaign_counter k ON k.campaign_id = g.id
         WHERE NOT EXISTS (SELECT 1 FROM redemption r
                            WHERE r.voucher_code = i.code AND r.order_id = i.order_id)
           AND (k.campaign_id IS NULL OR NOT g.active OR NOT v.active
                OR i.now < g.starts_at OR i.now >= g.ends_at
                OR i.now < v.starts_at OR i.now >= v.ends_at
                -- A scalar subquery: one probe of the key (as a join, the planner scanned
                -- every customer of the campaign for each request).
                OR COALESCE((SELECT gc.active FROM campaign_customer gc
                              WHERE gc.campaign_id = v.campaign_id
                                AND gc.customer_id = i.customer), 0) >= g.per_user_limit
                OR k.used >= k.total_limit
                OR k.budget_amount - k.budget_used
                   < fg_discount(i.order_amount, v.discount_amount, v.discount_percent,
                                 v.max_discount_amount))) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422',
            MESSAGE = 'a reserve a campaign decides';
    END IF;
    -- One customer's reserves of one campaign with a per-user limit, together: which of them
    -- is refused, and why (ALREADY_USED after the other's use, or the code's own
    -- OUT_OF_STOCK), depends on their order, which only the loop keeps.
    IF EXISTS (
        SELECT 1
          FROM unnest(p_codes, p_customers) i(code, customer)
         CROSS JOIN LATERAL (SELECT x.campaign_id FROM voucher x WHERE x.code = i.code OFFSET 0) v
          JOIN campaign g ON g.id = v.campaign_id AND g.per_user_limit IS NOT NULL
         GROUP BY v.campaign_id, i.customer
        HAVING count(*) > 1) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422',
            MESSAGE = 'one customer''s reserves of one campaign together';
    END IF;
    -- A retry in the batch of a request before it is answered by that request's row.
    IF (SELECT count(DISTINCT (k.code, k.order_id)) FROM unnest(p_codes, p_orders) k(code, order_id))
       <> cardinality(p_codes) THEN
        RAISE EXCEPTION USING ERRCODE = 'FG422', MESSAGE = 'an order twice in the batch';
    END IF;
    SELECT array_agg(q.idx ORDER BY q.idx), array_agg(q.outcome ORDER BY q.idx),
           array_agg(q.row_customer ORDER BY q.idx), array_agg(q.row_status ORDER BY q.idx),
           array_agg(q.row_discount ORDER BY q.idx), array_agg(q.row_expires ORDER BY q.idx),
           array_agg(q.idx ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE'),
           array_agg(q.code ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE'),
           array_agg(q.order_id ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE'),
           array_agg(q.customer ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE'),
           array_agg(q.order_amount ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE'),
           array_agg(q.discount ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE'),
           array_agg(q.now ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE'),
           array_agg(q.expires ORDER BY q.idx) FILTER (WHERE q.outcome = 'ELIGIBLE')
      INTO a_idx, a_outcome, a_customer, a_status, a_discount, a_expires,
           e_idx, e_codes, e_orders, e_customers, e_amounts, e_discounts, e_now, e_expires
      FROM (SELECT i.idx::INT AS idx, i.code, i.order_id, i.customer, i.order_amount, i.now,
                   r.customer_id AS row_customer, r.status AS row_status,
                   r.discount_amount AS row_discount, r.expires_at AS row_expires,
                   CASE WHEN r.order_id IS NOT NULL THEN
                            CASE WHEN r.customer_id <> i.customer THEN 'ORDER_CONFLICT'
                                 WHEN r.status = 3 THEN 'RESERVATION_RELEASED'
                                 ELSE 'REPLAY' END
                        WHEN v.code IS NULL THEN 'VOUCHER_NOT_FOUND'
                        WHEN NOT v.active THEN 'INACTIVE'
                        WHEN i.now < v.starts_at THEN 'NOT_STARTED'
                        WHEN i.now >= v.ends_at THEN 'EXPIRED'
                        WHEN i.order_amount < v.min_order_amount THEN 'MIN_ORDER_AMOUNT'
                        WHEN COALESCE(c.active, 0) >= v.per_user_limit THEN 'ALREADY_USED'
                        WHEN NOT EXISTS (SELECT 1 FROM voucher_slot vs
                                          WHERE vs.voucher_code = v.code AND vs.used < vs.cap)
                             THEN 'OUT_OF_STOCK'
                        WHEN b.amount - b.used
                             < fg_discount(i.order_amount, v.discount_amount, v.discount_percent,
                                           v.max_discount_amount)
                             THEN 'BUDGET_EXHAUSTED'
                        ELSE 'ELIGIBLE' END AS outcome,
                   fg_discount(i.order_amount, v.discount_amount, v.discount_percent,
                               v.max_discount_amount) AS discount,
                   i.now + make_interval(secs => v.reservation_ttl_seconds) AS expires
              FROM unnest(p_codes, p_orders, p_customers, p_order_amounts, p_now)
                     WITH ORDINALITY AS i(code, order_id, customer, order_amount, now, idx)
              LEFT JOIN redemption r ON r.voucher_code = i.code AND r.order_id = i.order_id
              LEFT JOIN voucher v ON v.code = i.code
              LEFT JOIN voucher_customer c
                     ON c.voucher_code = i.code AND c.customer_id = i.customer
              LEFT JOIN voucher_budget b ON b.voucher_code = i.code) q;

    RETURN QUERY
    WITH m AS (
        SELECT e.idx AS asked, s.*
          FROM fg_merge_strict(e_codes, e_orders, e_customers,
                               array_fill(1::SMALLINT, ARRAY[cardinality(e_codes)]),
                               e_amounts, e_discounts, e_now, e_expires,
                               array_fill(NULL::TEXT, ARRAY[cardinality(e_codes)]),
                               e_now, array_fill(false, ARRAY[cardinality(e_codes)])) s
          JOIN unnest(e_idx) WITH ORDINALITY e(idx, pos) ON s.idx = e.pos)
    SELECT a.idx,
           CASE WHEN m.asked IS NULL THEN a.outcome
                WHEN m.outcome = 'APPLIED' THEN 'RESERVED'
                WHEN m.outcome = 'UNCHANGED' AND m.status = 3 THEN 'RESERVATION_RELEASED'
                WHEN m.outcome = 'UNCHANGED' THEN 'REPLAY'
                ELSE m.outcome END,
           CASE WHEN m.asked IS NULL THEN a.customer ELSE m.customer_id END,
           CASE WHEN m.asked IS NULL THEN a.status ELSE m.status END,
           CASE WHEN m.asked IS NULL THEN a.discount ELSE m.discount_amount END,
           CASE WHEN m.asked IS NULL THEN a.expires ELSE m.expires_at END,
           NULL::TEXT, NULL::TEXT
      FROM unnest(a_idx, a_outcome, a_customer, a_status, a_discount, a_expires)
             AS a(idx, outcome, customer, status, discount, expires)
      LEFT JOIN m ON m.asked = a.idx
     ORDER BY a.idx;
END;
$$;

--
-- Name: fg_resize_slots(text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_resize_slots(p_code text, p_limit integer) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_used  BIGINT;
    v_k     INT;
    v_room  BIGINT;
BEGIN
    PERFORM 1 FROM voucher_slot s WHERE s.voucher_code = p_code ORDER BY s.slot FOR UPDATE;
    SELECT COALESCE(sum(s.used), 0), count(*) INTO v_used, v_k
      FROM voucher_slot s WHERE s.voucher_code = p_code;
    IF p_limit < v_used THEN
        RAISE EXCEPTION USING ERRCODE = 'FG409', MESSAGE = 'LIMIT_BELOW_USED',
              DETAIL = format('%s uses are held', v_used);
    END IF;
    v_room := p_limit - v_used;
    UPDATE voucher_slot s
       SET cap = s.used + v_room / v_k + CASE WHEN o.rank < v_room % v_k THEN 1 ELSE 0 END
      FROM (SELECT x.slot, row_number() OVER (ORDER BY x.slot) - 1 AS rank
              FROM voucher_slot x WHERE x.voucher_code = p_code) o
     WHERE s.voucher_code = p_code AND s.slot = o.slot;
    UPDATE voucher SET total_limit = p_limit WHERE code = p_code;
    RETURN v_used;
END;
$$;

--
-- Name: fg_set_slots(text, integer, smallint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_set_slots(p_code text, p_limit integer, p_slots smallint) RETURNS void
    LANGUAGE sql
    AS $$
    INSERT INTO voucher_slot (voucher_code, slot, cap)
    SELECT p_code, s, p_limit / p_slots + CASE WHEN s < p_limit % p_slots THEN 1 ELSE 0 END
      FROM generate_series(0, p_slots - 1) AS s
    ON CONFLICT (voucher_code, slot) DO UPDATE SET cap = EXCLUDED.cap;
$$;

--
-- Name: fg_slot_campaign_fixed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_slot_campaign_fixed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'voucher_slot.campaign of % never changes', OLD.voucher_code
          USING ERRCODE = 'check_violation', CONSTRAINT = 'voucher_slot_campaign_fixed';
END;
$$;

--
-- Name: fg_slot_room(text, bigint, text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_slot_room(p_code text, p_wanted bigint, p_first_order text, p_slots integer) RETURNS TABLE(slot smallint, room bigint)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    free  RECORD;
    got   BIGINT := 0;
    taken SMALLINT[] := '{}';
    rooms BIGINT[] := '{}';
BEGIN
    LOOP
        SELECT x.slot, x.cap - x.used AS room INTO free
          FROM voucher_slot x
         WHERE x.voucher_code = p_code AND x.used < x.cap AND x.slot <> ALL (taken)
         ORDER BY (x.slot - abs(hashtext(p_first_order) % p_slots) + p_slots) % p_slots
         LIMIT 1
           FOR UPDATE SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        taken := taken || free.slot;
        rooms := rooms || free.room;
        got := got + free.room;
        EXIT WHEN got >= p_wanted;
    END LOOP;
    IF got < p_wanted THEN
        SELECT COALESCE(array_agg(l.slot ORDER BY l.slot), '{}'),
               COALESCE(array_agg(l.cap - l.used ORDER BY l.slot), '{}')
          INTO taken, rooms
          FROM (SELECT x.slot, x.cap, x.used FROM voucher_slot x
                 WHERE x.voucher_code = p_code
                 ORDER BY x.slot
                   FOR UPDATE) l
         WHERE l.used < l.cap;
    END IF;
    RETURN QUERY SELECT t.slot, t.room FROM unnest(taken, rooms) WITH ORDINALITY t(slot, room, ord)
                  ORDER BY t.ord;
END;
$$;

--
-- Name: fg_take_slot(text, integer, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_take_slot(p_code text, p_start integer, p_slots integer) RETURNS smallint
    LANGUAGE plpgsql
    AS $$
DECLARE
    taken SMALLINT;
BEGIN
    UPDATE voucher_slot AS vs SET used = vs.used + 1
     WHERE (vs.voucher_code, vs.slot) = (
            SELECT x.voucher_code, x.slot FROM voucher_slot x
             WHERE x.voucher_code = p_code AND x.used < x.cap
             ORDER BY (x.slot - p_start + p_slots) % p_slots
             LIMIT 1
               FOR UPDATE SKIP LOCKED)
    RETURNING vs.slot INTO taken;
    IF FOUND THEN
        RETURN taken;
    END IF;
    SELECT l.slot INTO taken
      FROM (SELECT x.slot, x.used, x.cap FROM voucher_slot x
             WHERE x.voucher_code = p_code
             ORDER BY x.slot
               FOR UPDATE) l
     WHERE l.used < l.cap
     ORDER BY (l.slot - p_start + p_slots) % p_slots
     LIMIT 1;
    IF taken IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE voucher_slot AS vs SET used = vs.used + 1
     WHERE vs.voucher_code = p_code AND vs.slot = taken;
    RETURN taken;
END;
$$;

--
-- Name: fg_used(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_used(p_code text) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$
    SELECT COALESCE(sum(used), 0) FROM voucher_slot WHERE voucher_code = p_code;
$$;

--
-- Name: fg_validate(text, bigint, bigint, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fg_validate(p_code text, p_customer bigint, p_order_amount bigint, p_now timestamp with time zone) RETURNS TABLE(outcome text, discount_amount bigint, reservation_ttl_seconds integer)
    LANGUAGE plpgsql STABLE
    AS $$
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

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: campaign; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.campaign (
    id bigint NOT NULL,
    discount_amount bigint,
    discount_percent smallint,
    max_discount_amount bigint,
    min_order_amount bigint DEFAULT 0 NOT NULL,
    starts_at timestamp with time zone NOT NULL,
    ends_at timestamp with time zone NOT NULL,
    reservation_ttl_seconds integer NOT NULL,
    active boolean DEFAULT true NOT NULL,
    per_code_limit integer NOT NULL,
    per_user_limit integer,
    code_count bigint DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    flash_sale boolean DEFAULT false NOT NULL,
    version bigint DEFAULT 1 NOT NULL,
    gate_loaded boolean DEFAULT false NOT NULL,
    name text,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    exclusive boolean DEFAULT false NOT NULL,
    CONSTRAINT campaign_cap_only_with_percent CHECK (((max_discount_amount IS NULL) OR (discount_percent IS NOT NULL))),
    CONSTRAINT campaign_discount_amount_check CHECK (((discount_amount >= 0) AND (discount_amount <= '1000000000000000'::bigint))),
    CONSTRAINT campaign_discount_percent_check CHECK (((discount_percent >= 1) AND (discount_percent <= 100))),
    CONSTRAINT campaign_max_discount_amount_check CHECK (((max_discount_amount >= 0) AND (max_discount_amount <= '1000000000000000'::bigint))),
    CONSTRAINT campaign_metadata_keys CHECK (((jsonb_typeof(metadata) = 'object'::text) AND (jsonb_array_length(jsonb_path_query_array(metadata, '$.keyvalue()'::jsonpath)) <= 50))),
    CONSTRAINT campaign_min_order_amount_check CHECK (((min_order_amount >= 0) AND (min_order_amount <= '1000000000000000'::bigint))),
    CONSTRAINT campaign_name_length CHECK (((char_length(name) >= 1) AND (char_length(name) <= 200))),
    CONSTRAINT campaign_one_discount CHECK (((discount_amount IS NULL) <> (discount_percent IS NULL))),
    CONSTRAINT campaign_per_code_limit_check CHECK ((per_code_limit >= 1)),
    CONSTRAINT campaign_per_user_limit_check CHECK ((per_user_limit >= 1)),
    CONSTRAINT campaign_window CHECK ((ends_at > starts_at))
);

--
-- Name: campaign_counter; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.campaign_counter (
    campaign_id bigint NOT NULL,
    total_limit bigint,
    used bigint DEFAULT 0 NOT NULL,
    budget_amount bigint,
    budget_used bigint DEFAULT 0 NOT NULL,
    CONSTRAINT campaign_budget_used_within_amount CHECK (((budget_used >= 0) AND ((budget_amount IS NULL) OR (budget_used <= budget_amount)))),
    CONSTRAINT campaign_counter_budget_amount_check CHECK (((budget_amount >= 0) AND (budget_amount <= '1000000000000000'::bigint))),
    CONSTRAINT campaign_counter_total_limit_check CHECK ((total_limit >= 0)),
    CONSTRAINT campaign_used_within_limit CHECK (((used >= 0) AND ((total_limit IS NULL) OR (used <= total_limit))))
);

--
-- Name: campaign_customer; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.campaign_customer (
    campaign_id bigint NOT NULL,
    customer_id bigint NOT NULL,
    active integer NOT NULL,
    CONSTRAINT campaign_customer_active_check CHECK ((active >= 0)),
    CONSTRAINT campaign_customer_customer_id_check CHECK ((customer_id >= 1))
);

--
-- Name: campaign_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.campaign ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.campaign_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: campaign_rules; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.campaign_rules (
    campaign_id bigint NOT NULL,
    version bigint NOT NULL,
    starts_at timestamp with time zone NOT NULL,
    ends_at timestamp with time zone NOT NULL,
    active boolean NOT NULL,
    superseded_at timestamp with time zone NOT NULL
);

--
-- Name: customer_order; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.customer_order (
    order_id text NOT NULL,
    customer_id bigint NOT NULL,
    order_amount bigint NOT NULL,
    codes text[] NOT NULL,
    state smallint NOT NULL,
    decider bigint,
    discounts bigint[],
    expires_at timestamp with time zone,
    refusal text,
    refused_code text,
    release_reason text,
    created_at timestamp with time zone NOT NULL,
    settled_at timestamp with time zone,
    CONSTRAINT customer_order_amount CHECK (((order_amount >= 0) AND (order_amount <= '1000000000000000'::bigint))),
    CONSTRAINT customer_order_codes CHECK (((cardinality(codes) >= 1) AND (cardinality(codes) <= 5))),
    CONSTRAINT customer_order_customer_id CHECK ((customer_id >= 1)),
    CONSTRAINT customer_order_order_id_form CHECK ((((octet_length(order_id) >= 1) AND (octet_length(order_id) <= 64)) AND (order_id !~ '[^A-Za-z0-9_.:-]'::text))),
    CONSTRAINT customer_order_refused_has_refusal CHECK (((state = 5) = (refusal IS NOT NULL))),
    CONSTRAINT customer_order_release_reason CHECK ((release_reason = ANY (ARRAY['CANCELLED'::text, 'EXPIRED'::text, 'ABANDONED'::text]))),
    CONSTRAINT customer_order_released_has_reason CHECK (((state = 4) = (release_reason IS NOT NULL))),
    CONSTRAINT customer_order_reserved_has_discounts CHECK (((state <> ALL (ARRAY[2, 3])) OR ((cardinality(discounts) = cardinality(codes)) AND (expires_at IS NOT NULL)))),
    CONSTRAINT customer_order_state CHECK (((state >= 1) AND (state <= 5)))
);

--
-- Name: redemption; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.redemption (
    voucher_code text NOT NULL,
    order_id text NOT NULL,
    customer_id bigint NOT NULL,
    status smallint NOT NULL,
    order_amount bigint NOT NULL,
    discount_amount bigint NOT NULL,
    reserved_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    confirmed_at timestamp with time zone,
    released_at timestamp with time zone,
    release_reason text,
    slot smallint,
    CONSTRAINT redemption_customer_id_check CHECK ((customer_id >= 1)),
    CONSTRAINT redemption_discount_amount_check CHECK ((discount_amount >= 0)),
    CONSTRAINT redemption_order_amount_check CHECK (((order_amount >= 0) AND (order_amount <= '1000000000000000'::bigint))),
    CONSTRAINT redemption_order_id_form CHECK ((((octet_length(order_id) >= 1) AND (octet_length(order_id) <= 64)) AND (order_id !~ '[^A-Za-z0-9_.:-]'::text))),
    CONSTRAINT redemption_release_reason_check CHECK ((release_reason = ANY (ARRAY['CANCELLED'::text, 'EXPIRED'::text, 'REVOKED'::text]))),
    CONSTRAINT redemption_released_has_reason CHECK (((status = 3) = (release_reason IS NOT NULL))),
    CONSTRAINT redemption_status_check CHECK ((status = ANY (ARRAY[1, 2, 3])))
);

--
-- Name: voucher; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.voucher (
    code text NOT NULL,
    discount_amount bigint,
    min_order_amount bigint DEFAULT 0 NOT NULL,
    total_limit integer NOT NULL,
    per_user_limit integer DEFAULT 1 NOT NULL,
    starts_at timestamp with time zone NOT NULL,
    ends_at timestamp with time zone NOT NULL,
    flash_sale boolean DEFAULT false NOT NULL,
    reservation_ttl_seconds integer DEFAULT 900 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    counter_slots smallint DEFAULT 1 NOT NULL,
    active boolean DEFAULT true NOT NULL,
    discount_percent smallint,
    max_discount_amount bigint,
    version bigint DEFAULT 1 NOT NULL,
    gate_loaded boolean DEFAULT false NOT NULL,
    campaign_id bigint,
    name text,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    exclusive boolean DEFAULT false NOT NULL,
    CONSTRAINT voucher_cap_only_with_percent CHECK (((max_discount_amount IS NULL) OR (discount_percent IS NOT NULL))),
    CONSTRAINT voucher_code_check CHECK ((code ~ '^[A-Z0-9_-]{1,32}$'::text)),
    CONSTRAINT voucher_counter_slots_check CHECK (((counter_slots >= 1) AND (counter_slots <= 64))),
    CONSTRAINT voucher_discount_amount_check CHECK (((discount_amount >= 0) AND (discount_amount <= '1000000000000000'::bigint))),
    CONSTRAINT voucher_discount_percent_check CHECK (((discount_percent >= 1) AND (discount_percent <= 100))),
    CONSTRAINT voucher_max_discount_amount_check CHECK (((max_discount_amount >= 0) AND (max_discount_amount <= '1000000000000000'::bigint))),
    CONSTRAINT voucher_metadata_keys CHECK (((jsonb_typeof(metadata) = 'object'::text) AND (jsonb_array_length(jsonb_path_query_array(metadata, '$.keyvalue()'::jsonpath)) <= 50))),
    CONSTRAINT voucher_min_order_amount_check CHECK (((min_order_amount >= 0) AND (min_order_amount <= '1000000000000000'::bigint))),
    CONSTRAINT voucher_name_length CHECK (((char_length(name) >= 1) AND (char_length(name) <= 200))),
    CONSTRAINT voucher_one_discount CHECK (((discount_amount IS NULL) <> (discount_percent IS NULL))),
    CONSTRAINT voucher_per_user_limit_check CHECK ((per_user_limit >= 1)),
    CONSTRAINT voucher_reservation_ttl_seconds_check CHECK (((reservation_ttl_seconds >= 1) AND (reservation_ttl_seconds <= 604800))),
    CONSTRAINT voucher_total_limit_check CHECK (((total_limit >= 1) AND (total_limit <= 1000000000))),
    CONSTRAINT voucher_window_ordered CHECK ((ends_at > starts_at))
);

--
-- Name: voucher_budget; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.voucher_budget (
    voucher_code text NOT NULL,
    amount bigint,
    used bigint DEFAULT 0 NOT NULL,
    CONSTRAINT voucher_budget_amount_check CHECK (((amount >= 0) AND (amount <= '1000000000000000'::bigint))),
    CONSTRAINT voucher_budget_used_within_amount CHECK (((used >= 0) AND ((amount IS NULL) OR (used <= amount))))
);

--
-- Name: voucher_customer; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.voucher_customer (
    voucher_code text NOT NULL,
    customer_id bigint NOT NULL,
    active integer NOT NULL,
    CONSTRAINT voucher_customer_active_check CHECK ((active >= 0)),
    CONSTRAINT voucher_customer_customer_id_check CHECK ((customer_id >= 1))
);

--
-- Name: voucher_rules; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.voucher_rules (
    voucher_code text NOT NULL,
    version bigint NOT NULL,
    discount_amount bigint,
    discount_percent smallint,
    max_discount_amount bigint,
    min_order_amount bigint NOT NULL,
    starts_at timestamp with time zone NOT NULL,
    ends_at timestamp with time zone NOT NULL,
    active boolean NOT NULL,
    superseded_at timestamp with time zone NOT NULL
);

--
-- Name: voucher_slot; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.voucher_slot (
    voucher_code text NOT NULL,
    slot smallint NOT NULL,
    cap integer NOT NULL,
    used integer DEFAULT 0 NOT NULL,
    confirmed integer DEFAULT 0 NOT NULL,
    revoked bigint DEFAULT 0 NOT NULL,
    campaign boolean DEFAULT false NOT NULL,
    CONSTRAINT voucher_slot_campaign_slot_zero CHECK (((NOT campaign) OR (slot = 0))),
    CONSTRAINT voucher_slot_cap_check CHECK ((cap >= 0)),
    CONSTRAINT voucher_slot_confirmed_within_used CHECK (((confirmed >= 0) AND (confirmed <= used))),
    CONSTRAINT voucher_slot_revoked_check CHECK ((revoked >= 0)),
    CONSTRAINT voucher_slot_slot_check CHECK (((slot >= 0) AND (slot <= 63))),
    CONSTRAINT voucher_slot_used_within_cap CHECK (((used >= 0) AND (used <= cap)))
);

--
-- Name: campaign_counter campaign_counter_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.campaign_counter
    ADD CONSTRAINT campaign_counter_pkey PRIMARY KEY (campaign_id);

--
-- Name: campaign_customer campaign_customer_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.campaign_customer
    ADD CONSTRAINT campaign_customer_pkey PRIMARY KEY (campaign_id, customer_id);

--
-- Name: campaign campaign_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.campaign
    ADD CONSTRAINT campaign_pkey PRIMARY KEY (id);

--
-- Name: campaign_rules campaign_rules_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.campaign_rules
    ADD CONSTRAINT campaign_rules_pkey PRIMARY KEY (campaign_id, version);

--
-- Name: customer_order customer_order_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.customer_order
    ADD CONSTRAINT customer_order_pkey PRIMARY KEY (order_id);

--
-- Name: redemption redemption_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.redemption
    ADD CONSTRAINT redemption_pkey PRIMARY KEY (voucher_code, order_id);

--
-- Name: voucher_budget voucher_budget_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.voucher_budget
    ADD CONSTRAINT voucher_budget_pkey PRIMARY KEY (voucher_code);

--
-- Name: voucher_customer voucher_customer_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.voucher_customer
    ADD CONSTRAINT voucher_customer_pkey PRIMARY KEY (voucher_code, customer_id);

--
-- Name: voucher voucher_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.voucher
    ADD CONSTRAINT voucher_pkey PRIMARY KEY (code);

--
-- Name: voucher_rules voucher_rules_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.voucher_rules
    ADD CONSTRAINT voucher_rules_pkey PRIMARY KEY (voucher_code, version);

--
-- Name: voucher_slot voucher_slot_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.voucher_slot
    ADD CONSTRAINT voucher_slot_pkey PRIMARY KEY (voucher_code, slot);

--
-- Name: campaign_flash_by_end; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX campaign_flash_by_end ON public.campaign USING btree (ends_at) WHERE flash_sale;

--
-- Name: campaign_in_gate; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX campaign_in_gate ON public.campaign USING btree (id) WHERE gate_loaded;

--
-- Name: campaign_rules_superseded; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX campaign_rules_superseded ON public.campaign_rules USING btree (superseded_at);

--
-- Name: customer_order_pending; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX customer_order_pending ON public.customer_order USING btree (created_at) WHERE (state = 1);

--
-- Name: customer_order_reserved_expiry; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX customer_order_reserved_expiry ON public.customer_order USING btree (expires_at) WHERE (state = 2);

--
-- Name: customer_order_settled; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX customer_order_settled ON public.customer_order USING btree (settled_at) WHERE (state >= 3);

--
-- Name: redemption_by_customer; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX redemption_by_customer ON public.redemption USING btree (voucher_code, customer_id, order_id);

--
-- Name: redemption_by_status; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX redemption_by_status ON public.redemption USING btree (voucher_code, status, order_id);

--
-- Name: redemption_reserved_expiry; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX redemption_reserved_expiry ON public.redemption USING btree (expires_at) WHERE (status = 1);

--
-- Name: voucher_by_campaign; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX voucher_by_campaign ON public.voucher USING btree (campaign_id, code) WHERE (campaign_id IS NOT NULL);

--
-- Name: voucher_flash_by_end; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX voucher_flash_by_end ON public.voucher USING btree (ends_at) WHERE flash_sale;

--
-- Name: voucher_in_gate; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX voucher_in_gate ON public.voucher USING btree (code) WHERE gate_loaded;

--
-- Name: voucher_rules_superseded; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX voucher_rules_superseded ON public.voucher_rules USING btree (superseded_at);

--
-- Name: voucher_single; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX voucher_single ON public.voucher USING btree (code) WHERE (campaign_id IS NULL);

--
-- Name: campaign_counter campaign_counter_budget_unused; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER campaign_counter_budget_unused BEFORE INSERT OR UPDATE ON public.campaign_counter FOR EACH ROW WHEN ((new.budget_amount IS NULL)) EXECUTE FUNCTION public.fg_campaign_budget_unused();

--
-- Name: campaign_customer campaign_customer_at_zero; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER campaign_customer_at_zero AFTER UPDATE OF active ON public.campaign_customer FOR EACH ROW WHEN ((new.active = 0)) EXECUTE FUNCTION public.fg_forget_idle_campaign_customer();

--
-- Name: voucher_customer voucher_customer_at_zero; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER voucher_customer_at_zero AFTER UPDATE OF active ON public.voucher_customer FOR EACH ROW WHEN ((new.active = 0)) EXECUTE FUNCTION public.fg_forget_idle_customer();

--
-- Name: voucher_slot voucher_slot_campaign_fixed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER voucher_slot_campaign_fixed BEFORE UPDATE OF campaign ON public.voucher_slot FOR EACH ROW WHEN ((new.campaign IS DISTINCT FROM old.campaign)) EXECUTE FUNCTION public.fg_slot_campaign_fixed();

--
-- Name: voucher_slot voucher_slot_caps_sum; Type: TRIGGER; Schema: public; Owner: -
--

CREATE CONSTRAINT TRIGGER voucher_slot_caps_sum AFTER INSERT OR UPDATE OF cap, voucher_code ON public.voucher_slot DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((NOT new.campaign)) EXECUTE FUNCTION public.fg_check_slot_caps();

--
-- Name: voucher_slot voucher_slot_caps_sum_deleted; Type: TRIGGER; Schema: public; Owner: -
--

CREATE CONSTRAINT TRIGGER voucher_slot_caps_sum_deleted AFTER DELETE ON public.voucher_slot DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((NOT old.campaign)) EXECUTE FUNCTION public.fg_check_slot_caps();

--
-- Name: voucher voucher_total_limit_caps_sum; Type: TRIGGER; Schema: public; Owner: -
--

CREATE CONSTRAINT TRIGGER voucher_total_limit_caps_sum AFTER INSERT OR UPDATE OF total_limit ON public.voucher DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ((new.campaign_id IS NULL)) EXECUTE FUNCTION public.fg_check_slot_caps();

--
-- PostgreSQL database dump complete
--

