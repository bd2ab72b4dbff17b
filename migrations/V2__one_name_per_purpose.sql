-- One function per purpose: fg_reserve_strict holds the set-based reserve whole (the body of
-- fg_reserve_strict_single, whose name said "no campaigns", not "one request", is now its own),
-- and fg_reserve_set, which nothing but a test called, goes. sql/functions/fg_reserve_strict.sql
-- is applied right after this migration, in the same run of `migrate`; a reserve batch in
-- between fails on the set-based path and is answered by the loop.
DROP FUNCTION IF EXISTS fg_reserve_set(TEXT[], TEXT[], BIGINT[], BIGINT[], TIMESTAMPTZ[]);
DROP FUNCTION IF EXISTS fg_reserve_strict_single(TEXT[], TEXT[], BIGINT[], BIGINT[], TIMESTAMPTZ[]);
