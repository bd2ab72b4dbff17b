#!/usr/bin/env bash
# One batch of 500 expiries, 499 of a voucher's orders and one of a campaign's code, written by
# the set-based `fg_merge_strict` and by the loop `fg_merge_batch` (a savepoint a change), each
# from the same state and rolled back, RUNS times in turn (docs/BENCHMARKS.md, "Given-back uses
# of campaigns' codes (V24)"). A scratch database gets migrations/ and sql/functions/ as
# scripts/schema.sh applies them, and is dropped at the end.
#
#   ./loadtest/sql/expiry-batch.sh        # RUNS=6 by default
set -euo pipefail
cd "$(dirname "$0")/../.."
base=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432}
runs=${RUNS:-6}
db=fg_bench_expiry_$$
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
psql_q() { psql --no-psqlrc -X -q -v ON_ERROR_STOP=1 "$@"; }
psql_q -d "$base/postgres" -c "CREATE DATABASE \"$db\""
trap 'psql_q -d "$base/postgres" -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)"' EXIT
for f in $(ls migrations/*.sql | sort -t V -k2 -n) sql/functions/*.sql; do
  psql_q --single-transaction -d "$base/$db" -f "$f" >/dev/null
done
psql_q --single-transaction -d "$base/$db" >/dev/null <<'SQL'
INSERT INTO campaign (id, discount_amount, starts_at, ends_at, reservation_ttl_seconds, active,
                      per_code_limit, per_user_limit, min_order_amount)
OVERRIDING SYSTEM VALUE
VALUES (8, 100, now() - interval '1 hour', now() + interval '1 hour', 60, true, 1, 3, 100);
INSERT INTO campaign_counter (campaign_id, total_limit, budget_amount) VALUES (8, 1000, NULL);
INSERT INTO voucher (code, discount_amount, total_limit, per_user_limit, starts_at, ends_at,
                     flash_sale, counter_slots, active, reservation_ttl_seconds,
                     min_order_amount, campaign_id)
VALUES ('BV', 100, 1000, 1, now() - interval '1 hour', now() + interval '1 hour', false, 4,
        true, 60, 100, NULL),
       ('BC', 100, 10, 1, now() - interval '1 hour', now() + interval '1 hour', false, 1, true,
        60, 100, 8);
SELECT fg_set_slots('BV', 1000, 4::smallint);
SELECT fg_set_slots('BC', 10, 1::smallint);
CREATE TABLE b AS
SELECT CASE WHEN i = 250 THEN 'BC' ELSE 'BV' END AS code, 'o' || i AS o, i::bigint AS c
  FROM generate_series(1, 500) i;
SELECT count(*) FROM fg_merge_batch(
    (SELECT array_agg(code ORDER BY o) FROM b), (SELECT array_agg(o ORDER BY o) FROM b),
    (SELECT array_agg(c ORDER BY o) FROM b), array_fill(1::smallint, ARRAY[500]),
    array_fill(1000::bigint, ARRAY[500]), array_fill(100::bigint, ARRAY[500]),
    array_fill(now(), ARRAY[500]), array_fill(now() + interval '30 s', ARRAY[500]),
    array_fill(NULL::text, ARRAY[500]), array_fill(now(), ARRAY[500]),
    array_fill(false, ARRAY[500]), true);
SQL
args="(SELECT array_agg(code ORDER BY o) FROM b), (SELECT array_agg(o ORDER BY o) FROM b),
      array_fill(NULL::bigint, ARRAY[500]), array_fill(3::smallint, ARRAY[500]),
      array_fill(NULL::bigint, ARRAY[500]), array_fill(NULL::bigint, ARRAY[500]),
      array_fill(NULL::timestamptz, ARRAY[500]), array_fill(NULL::timestamptz, ARRAY[500]),
      array_fill('EXPIRED'::text, ARRAY[500]), array_fill(now(), ARRAY[500]),
      array_fill(false, ARRAY[500])"
# One batch through `function`, in a transaction rolled back; its time in ms.
once() {
  psql --no-psqlrc -X -q -d "$base/$db" -At <<SQL | tail -n 1
BEGIN;
SELECT clock_timestamp() AS t0 \gset
SELECT count(*) FILTER (WHERE outcome = 'APPLIED') FROM $1($args$2) \gset applied_
SELECT round(extract(epoch FROM clock_timestamp() - :'t0') * 1000, 1)
       || ' ms, ' || :applied_count || ' applied';
ROLLBACK;
SQL
}
for i in $(seq "$runs"); do
  echo "run $i: fg_merge_strict $(once fg_merge_strict ''); fg_merge_batch $(once fg_merge_batch ', true')"
done
