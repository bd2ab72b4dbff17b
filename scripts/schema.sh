#!/usr/bin/env bash
# docs/schema.sql: the whole schema in one file, as migrations/ (the tables) and sql/functions/
# (one file per SQL function) leave it. It applies both to a scratch database, dumps the schema
# and drops the database.
#
#   ./scripts/schema.sh              # writes docs/schema.sql
#   ./scripts/schema.sh --check      # exits 1 with a diff when docs/schema.sql is stale
#   ./scripts/schema.sh --dump URL   # prints the schema of the database at URL as docs/schema.sql
#                                    # holds it (tests/it/schema.rs compares a database migrated
#                                    # by the service itself with the file)
#
# The files run as the service's migrator (refinery, then `Store::migrate`'s function files) runs
# them: the migrations in version order, then the function files in name order, each file in one
# transaction. tests/it/schema.rs checks that the two agree.
#
# Postgres: $TEST_DATABASE_URL, a server URL without a database name, as the tests take it
# (default postgres://postgres@127.0.0.1:5432). pg_dump's major version must not be older than
# the server's; the file is written by whichever one runs, so its output can differ a little
# from one major version to the next.
set -euo pipefail
cd "$(dirname "$0")/.."

out=docs/schema.sql
base=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432}
base=${base%/}

# dump URL: the schema of the database at URL, normalised so that the file changes only when
# the schema does. The refinery history table and fg_sql_function are left out: they are the
# migrator's bookkeeping, and a database migrated by psql has neither.
dump() {
  printf -- '-- The schema migrations/ and sql/functions/ leave: written by scripts/schema.sh, do not edit.\n'
  pg_dump --schema-only --no-owner --no-privileges \
    --exclude-table=refinery_schema_history --exclude-table=fg_sql_function --dbname="$1" |
    # Lines that differ between pg_dump builds or runs: its version and the server's, and the
    # random key of `\restrict` / `\unrestrict` (pg_dump 17.6, 16.10, 15.14 and later).
    sed -E -e '/^\\(un)?restrict /d' -e '/^-- Dumped (from database|by pg_dump) version /d' |
    cat -s
}

# The migrations in version order (V2 before V10), as refinery orders them.
migrations() {
  local f name
  for f in migrations/*.sql; do
    name=${f##*/}
    if [[ ! $name =~ ^V([0-9]+)__[A-Za-z0-9_]+\.sql$ ]]; then
      echo "$f: not a versioned migration (V<n>__<name>.sql); this script applies only those" >&2
      exit 1
    fi
    printf '%s %s\n' "${BASH_REMATCH[1]}" "$f"
  done | sort -n | cut -d' ' -f2
}

# Scratch database and file, gone however the script ends.
db=
tmp=
cleanup() {
  rm -f "$tmp"
  [ -z "$db" ] || psql_admin "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)"
}
trap cleanup EXIT

export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
psql_admin() { psql --no-psqlrc -X -q -v ON_ERROR_STOP=1 -d "$base/postgres" -c "$1" >/dev/null; }

# generate: the migrations applied to a scratch database, its dump in $tmp.
generate() {
  local files f
  files=$(migrations)
  tmp=$(mktemp)
  db=fg_schema_$$_$RANDOM
  psql_admin "CREATE DATABASE \"$db\""
  # Then the SQL functions, one file each, in name order, as the migrator applies them.
  for f in $files sql/functions/*.sql; do
    psql --no-psqlrc -X -q -v ON_ERROR_STOP=1 --single-transaction -d "$base/$db" -f "$f" >/dev/null
  done
  dump "$base/$db" >"$tmp"
}

case "${1:-}" in
  "")
    generate
    cat "$tmp" >"$out"
    echo "wrote $out" >&2
    ;;
  --check)
    generate
    if ! diff -u "$out" "$tmp"; then
      echo "$out is stale: run scripts/schema.sh" >&2
      exit 1
    fi
    ;;
  --dump)
    [ $# -eq 2 ] || { echo "usage: $0 --dump DATABASE_URL" >&2; exit 2; }
    dump "$2"
    ;;
  *) echo "usage: $0 [--check | --dump DATABASE_URL]" >&2; exit 2 ;;
esac
