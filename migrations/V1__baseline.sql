-- The schema: tables, their constraints and indexes. The SQL functions, and the triggers that
-- call them, are not here: each is defined in one file of sql/functions/, applied after the
-- versioned migrations (shared/src/store/functions.rs). docs/schema.sql is the whole schema as
-- both leave it; docs/ARCHITECTURE.md, "The schema", says what each table holds and enforces.
--
-- This migration squashes V1-V24 of the schema's history into one baseline (no release ran
-- them). A database migrated before it is recreated: docs/DEPLOY.md.

-- No statement of the service runs for seconds: one that does is stuck behind a lock or
-- runaway, and holding a connection for it starves every request behind it. Set on the
-- database rather than with SET by each connection, which would pin RDS Proxy's connections;
-- the migrator lifts it for its own session.
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET statement_timeout = %L', current_database(), '5s');
END;
$$;

CREATE TYPE fg_change AS (
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

CREATE TABLE campaign (
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
    CONSTRAINT campaign_cap_only_with_percent CHECK (((max_discount_amount IS NULL) OR (discount_percent IS NOT NULL))),
    CONSTRAINT campaign_discount_amount_check CHECK (((discount_amount >= 0) AND (discount_amount <= '1000000000000000'::bigint))),
    CONSTRAINT campaign_discount_percent_check CHECK (((discount_percent >= 1) AND (discount_percent <= 100))),
    CONSTRAINT campaign_max_discount_amount_check CHECK (((max_discount_amount >= 0) AND (max_discount_amount <= '1000000000000000'::bigint))),
    CONSTRAINT campaign_min_order_amount_check CHECK (((min_order_amount >= 0) AND (min_order_amount <= '1000000000000000'::bigint))),
    CONSTRAINT campaign_one_discount CHECK (((discount_amount IS NULL) <> (discount_percent IS NULL))),
    CONSTRAINT campaign_per_code_limit_check CHECK ((per_code_limit >= 1)),
    CONSTRAINT campaign_per_user_limit_check CHECK ((per_user_limit >= 1)),
    CONSTRAINT campaign_window CHECK ((ends_at > starts_at))
);

CREATE TABLE campaign_counter (
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

CREATE TABLE campaign_customer (
    campaign_id bigint NOT NULL,
    customer_id bigint NOT NULL,
    active integer NOT NULL,
    CONSTRAINT campaign_customer_active_check CHECK ((active >= 0)),
    CONSTRAINT campaign_customer_customer_id_check CHECK ((customer_id >= 1))
);

ALTER TABLE campaign ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME campaign_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE campaign_rules (
    campaign_id bigint NOT NULL,
    version bigint NOT NULL,
    starts_at timestamp with time zone NOT NULL,
    ends_at timestamp with time zone NOT NULL,
    active boolean NOT NULL,
    superseded_at timestamp with time zone NOT NULL
);

CREATE TABLE redemption (
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
    CONSTRAINT redemption_order_id_check CHECK ((order_id ~ '^[A-Za-z0-9_.:-]{1,64}$'::text)),
    CONSTRAINT redemption_release_reason_check CHECK ((release_reason = ANY (ARRAY['CANCELLED'::text, 'EXPIRED'::text, 'REVOKED'::text]))),
    CONSTRAINT redemption_released_has_reason CHECK (((status = 3) = (release_reason IS NOT NULL))),
    CONSTRAINT redemption_status_check CHECK ((status = ANY (ARRAY[1, 2, 3])))
);

CREATE TABLE voucher (
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
    CONSTRAINT voucher_cap_only_with_percent CHECK (((max_discount_amount IS NULL) OR (discount_percent IS NOT NULL))),
    CONSTRAINT voucher_code_check CHECK ((code ~ '^[A-Z0-9_-]{1,32}$'::text)),
    CONSTRAINT voucher_counter_slots_check CHECK (((counter_slots >= 1) AND (counter_slots <= 64))),
    CONSTRAINT voucher_discount_amount_check CHECK (((discount_amount >= 0) AND (discount_amount <= '1000000000000000'::bigint))),
    CONSTRAINT voucher_discount_percent_check CHECK (((discount_percent >= 1) AND (discount_percent <= 100))),
    CONSTRAINT voucher_max_discount_amount_check CHECK (((max_discount_amount >= 0) AND (max_discount_amount <= '1000000000000000'::bigint))),
    CONSTRAINT voucher_min_order_amount_check CHECK (((min_order_amount >= 0) AND (min_order_amount <= '1000000000000000'::bigint))),
    CONSTRAINT voucher_one_discount CHECK (((discount_amount IS NULL) <> (discount_percent IS NULL))),
    CONSTRAINT voucher_per_user_limit_check CHECK ((per_user_limit >= 1)),
    CONSTRAINT voucher_reservation_ttl_seconds_check CHECK (((reservation_ttl_seconds >= 1) AND (reservation_ttl_seconds <= 604800))),
    CONSTRAINT voucher_total_limit_check CHECK (((total_limit >= 1) AND (total_limit <= 1000000000))),
    CONSTRAINT voucher_window_ordered CHECK ((ends_at > starts_at))
);

CREATE TABLE voucher_budget (
    voucher_code text NOT NULL,
    amount bigint,
    used bigint DEFAULT 0 NOT NULL,
    CONSTRAINT voucher_budget_amount_check CHECK (((amount >= 0) AND (amount <= '1000000000000000'::bigint))),
    CONSTRAINT voucher_budget_used_within_amount CHECK (((used >= 0) AND ((amount IS NULL) OR (used <= amount))))
);

CREATE TABLE voucher_customer (
    voucher_code text NOT NULL,
    customer_id bigint NOT NULL,
    active integer NOT NULL,
    CONSTRAINT voucher_customer_active_check CHECK ((active >= 0)),
    CONSTRAINT voucher_customer_customer_id_check CHECK ((customer_id >= 1))
);

CREATE TABLE voucher_rules (
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

CREATE TABLE voucher_slot (
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

ALTER TABLE ONLY campaign_counter
    ADD CONSTRAINT campaign_counter_pkey PRIMARY KEY (campaign_id);

ALTER TABLE ONLY campaign_customer
    ADD CONSTRAINT campaign_customer_pkey PRIMARY KEY (campaign_id, customer_id);

ALTER TABLE ONLY campaign
    ADD CONSTRAINT campaign_pkey PRIMARY KEY (id);

ALTER TABLE ONLY campaign_rules
    ADD CONSTRAINT campaign_rules_pkey PRIMARY KEY (campaign_id, version);

ALTER TABLE ONLY redemption
    ADD CONSTRAINT redemption_pkey PRIMARY KEY (voucher_code, order_id);

ALTER TABLE ONLY voucher_budget
    ADD CONSTRAINT voucher_budget_pkey PRIMARY KEY (voucher_code);

ALTER TABLE ONLY voucher_customer
    ADD CONSTRAINT voucher_customer_pkey PRIMARY KEY (voucher_code, customer_id);

ALTER TABLE ONLY voucher
    ADD CONSTRAINT voucher_pkey PRIMARY KEY (code);

ALTER TABLE ONLY voucher_rules
    ADD CONSTRAINT voucher_rules_pkey PRIMARY KEY (voucher_code, version);

ALTER TABLE ONLY voucher_slot
    ADD CONSTRAINT voucher_slot_pkey PRIMARY KEY (voucher_code, slot);

CREATE INDEX campaign_flash_by_end ON campaign USING btree (ends_at) WHERE flash_sale;

CREATE INDEX campaign_in_gate ON campaign USING btree (id) WHERE gate_loaded;

CREATE INDEX campaign_rules_superseded ON campaign_rules USING btree (superseded_at);

CREATE INDEX redemption_by_customer ON redemption USING btree (voucher_code, customer_id, order_id);

CREATE INDEX redemption_by_status ON redemption USING btree (voucher_code, status, order_id);

CREATE INDEX redemption_reserved_expiry ON redemption USING btree (expires_at) WHERE (status = 1);

CREATE INDEX voucher_by_campaign ON voucher USING btree (campaign_id, code) WHERE (campaign_id IS NOT NULL);

CREATE INDEX voucher_flash_by_end ON voucher USING btree (ends_at) WHERE flash_sale;

CREATE INDEX voucher_in_gate ON voucher USING btree (code) WHERE gate_loaded;

CREATE INDEX voucher_rules_superseded ON voucher_rules USING btree (superseded_at);

CREATE INDEX voucher_single ON voucher USING btree (code) WHERE (campaign_id IS NULL);
