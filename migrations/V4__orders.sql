-- Orders of several codes, all or none (docs/ARCHITECTURE.md, "Orders of several codes").
--
-- `customer_order` is the order's intent, written before its first code is reserved: a process
-- that dies between two codes leaves it PENDING, and the sweeper gives back every use such an
-- order holds once it is older than the longest a request may take (ORDER_LEASE). Each code's
-- use is the code's own reservation row (`redemption`, the same orderId), so the per-code
-- routes, counters, gates and sweeps see it as any other reservation.
--
-- state: 1 PENDING (being decided), 2 RESERVED (every code held), 3 CONFIRMED, 4 RELEASED
-- (cancelled, expired, or given back after a crash), 5 REFUSED (a code refused: nothing held).
-- It only moves up, and from PENDING only to RESERVED, RELEASED or REFUSED.
CREATE TABLE customer_order (
    order_id text PRIMARY KEY CONSTRAINT customer_order_order_id CHECK (order_id ~ '^[A-Za-z0-9_.:-]{1,64}$'),
    customer_id bigint NOT NULL CONSTRAINT customer_order_customer_id CHECK (customer_id >= 1),
    order_amount bigint NOT NULL
        CONSTRAINT customer_order_amount CHECK (order_amount BETWEEN 0 AND 1000000000000000),
    codes text[] NOT NULL CONSTRAINT customer_order_codes CHECK (cardinality(codes) BETWEEN 1 AND 5),
    state smallint NOT NULL CONSTRAINT customer_order_state CHECK (state BETWEEN 1 AND 5),
    -- PENDING: the request deciding it (a random token), so that a retry never decides beside
    -- it; NULL once that request failed and let go, for a retry to take it up.
    decider bigint,
    -- RESERVED and CONFIRMED (and RELEASED after them): each code's discount, in the order of `codes`, and when the first of
    -- the codes' reservations expires (the order expires with it).
    discounts bigint[],
    expires_at timestamp with time zone,
    -- REFUSED: the refusal's outcome word and the code that refused.
    refusal text,
    refused_code text,
    -- RELEASED: CANCELLED, EXPIRED or ABANDONED (a crash left it PENDING).
    release_reason text CONSTRAINT customer_order_release_reason
        CHECK (release_reason IN ('CANCELLED', 'EXPIRED', 'ABANDONED')),
    created_at timestamp with time zone NOT NULL,
    settled_at timestamp with time zone,
    CONSTRAINT customer_order_reserved_has_discounts
        CHECK (state NOT IN (2, 3) OR (cardinality(discounts) = cardinality(codes) AND expires_at IS NOT NULL)),
    CONSTRAINT customer_order_refused_has_refusal CHECK ((state = 5) = (refusal IS NOT NULL)),
    CONSTRAINT customer_order_released_has_reason CHECK ((state = 4) = (release_reason IS NOT NULL))
);

-- The sweeper's three reads, each of what is live or due, never of the history: PENDING orders
-- by age (a crash to undo), RESERVED ones by expiry, settled ones by when they settled (retired
-- after ORDER_KEPT).
CREATE INDEX customer_order_pending ON customer_order (created_at) WHERE state = 1;
CREATE INDEX customer_order_reserved_expiry ON customer_order (expires_at) WHERE state = 2;
CREATE INDEX customer_order_settled ON customer_order (settled_at) WHERE state >= 3;

-- A code created exclusive is never combined with another in one order. Set at creation only,
-- so a process may keep it with the code's kind.
ALTER TABLE voucher ADD COLUMN exclusive boolean NOT NULL DEFAULT false;
ALTER TABLE campaign ADD COLUMN exclusive boolean NOT NULL DEFAULT false;
