-- Flashgate gate: which copy of Redis' data a script runs on. Put in front of the scripts that
-- record or compare it (shared/src/gate/mod.rs).
--
-- A failover promotes a replica, which may lack the last writes its master acknowledged, and
-- the promoted node takes a new replication id; a restart without its data takes one too.
-- `load.lua` records the id in the voucher's `meta` (field `replid`): while it is still the
-- id of the node the script runs on, the gate holds every order it ever granted for the voucher,
-- so an order it does not know was never granted. See docs/ARCHITECTURE.md, "Mode B: what a
-- client sees while events are in flight".

-- The replication id of the node this script runs on ('' if the server does not report one).
local function incarnation()
  return string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)') or ''
end
