-- The sweep's warm-up step asks, every run, for the flash vouchers whose sale starts within the
-- lead and has not ended (`Store::flash_vouchers_starting`). Without an index that is a scan of
-- every voucher ever created, a cost that grows with history; by `ends_at` among flash vouchers
-- it reads only those not yet over: what is live or coming.
CREATE INDEX voucher_flash_by_end ON voucher (ends_at) WHERE flash_sale;
