-- The customer counters left at 0 before V12, once. Only row locks: a reserve waits only if it
-- is a returning customer whose row at 0 is being deleted. On a large table it takes a while, so
-- run migrate outside a sale (docs/DEPLOY.md).
DELETE FROM voucher_customer WHERE active = 0;
