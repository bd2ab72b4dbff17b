-- Whether the gate may hold a voucher.
--
-- In mode B a use the gate grants reaches Postgres later, as an event. When a flash voucher is
-- not in the gate, either it never was (no event of it can be on the way: load it at once) or
-- Redis lost its data (events it granted may still be on the way: wait for them before loading,
-- or their uses would be handed out twice). Redis cannot tell the two apart after the loss, so
-- Postgres keeps the fact. Set by the warm-up before it loads; cleared by the sweeper when it
-- retires the voucher from the gate (its sale over, nothing in flight). The sweeper visits the
-- marked vouchers only, so a sweep costs what is live, not what history holds. The vouchers that
-- exist now may have been loaded: they are marked (and retired by the next sweeps if over).
ALTER TABLE voucher ADD COLUMN gate_loaded boolean NOT NULL DEFAULT false;
UPDATE voucher SET gate_loaded = true WHERE flash_sale;
CREATE INDEX voucher_in_gate ON voucher (code) WHERE gate_loaded;
