-- Whether the gate has ever loaded a voucher.
--
-- In mode B a use the gate grants reaches Postgres later, as an event. When a flash voucher is
-- not in the gate, either it never was (no event of it can be on the way: load it at once) or
-- Redis lost its data (events it granted may still be on the way: wait for them before loading,
-- or their uses would be handed out twice). Redis cannot tell the two apart after the loss, so
-- Postgres keeps the fact. Set by the warm-up before it loads; never cleared while the gate may
-- hold the voucher. The vouchers that exist now may have been loaded: they are marked.
ALTER TABLE voucher ADD COLUMN gate_loaded boolean NOT NULL DEFAULT false;
UPDATE voucher SET gate_loaded = true WHERE flash_sale;
