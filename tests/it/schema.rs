//! docs/schema.sql, the one place to read the current schema, is what the service's own
//! migrations leave: a migration added or changed without the file being written again fails
//! here. The dump and its normalisation are `scripts/schema.sh --dump`'s, so the file and this
//! check cannot disagree on them.

use std::path::Path;
use std::process::Command;

use shared::store::Store;

use crate::harness::{postgres_base, settings, unique_name, Cleanup};

#[tokio::test]
async fn docs_schema_sql_is_what_the_migrations_leave() {
    let db_name = unique_name("fg_test_schema");
    let _cleanup = Cleanup::database(&db_name);
    let url = format!("{}/{db_name}", postgres_base());
    let store = Store::connect(&settings(&[("DATABASE_URL", url.as_str())]).database).unwrap();
    store.ensure_database().await.unwrap();
    store.migrate().await.expect("migrate");

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dumped = Command::new("bash")
        .arg(root.join("scripts/schema.sh"))
        .args(["--dump", &url])
        .output()
        .expect("run scripts/schema.sh --dump");
    assert!(
        dumped.status.success(),
        "scripts/schema.sh --dump failed: {}",
        String::from_utf8_lossy(&dumped.stderr)
    );
    let actual = String::from_utf8(dumped.stdout).unwrap();
    let expected = std::fs::read_to_string(root.join("docs/schema.sql")).unwrap_or_default();
    if actual != expected {
        panic!(
            "docs/schema.sql is not the schema the migrations leave: run scripts/schema.sh \
             (scripts/schema.sh --check shows the diff)\n{}",
            first_difference(&expected, &actual)
        );
    }
}

/// Where two texts first differ, by line, for the failure message.
fn first_difference(expected: &str, actual: &str) -> String {
    let (mut expected_lines, mut actual_lines) = (expected.lines(), actual.lines());
    for n in 1.. {
        let (e, a) = (expected_lines.next(), actual_lines.next());
        if e != a {
            return format!(
                "first difference, line {n}:\n  docs/schema.sql: {}\n  migrations:      {}",
                e.unwrap_or("<end of file>"),
                a.unwrap_or("<end of file>")
            );
        }
        if e.is_none() {
            break;
        }
    }
    "the texts differ only in line endings".to_owned()
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    client
}

/// A fresh database for one test, created empty.
async fn empty_database(prefix: &str) -> (String, Cleanup) {
    let db_name = unique_name(prefix);
    let cleanup = Cleanup::database(&db_name);
    connect(&format!("{}/postgres", postgres_base()))
        .await
        .batch_execute(&format!("CREATE DATABASE \"{db_name}\""))
        .await
        .unwrap();
    (format!("{}/{db_name}", postgres_base()), cleanup)
}

#[tokio::test]
async fn every_connection_to_the_services_database_has_a_five_second_statement_timeout() {
    let (url, _cleanup) = empty_database("fg_test_timeout").await;
    let store = Store::connect(&settings(&[("DATABASE_URL", url.as_str())]).database).unwrap();
    store.migrate().await.expect("migrate");
    // Set on the database, so every new connection has it without a SET of its own.
    let timeout = connect(&url)
        .await
        .query_one("SHOW statement_timeout", &[])
        .await
        .unwrap()
        .get::<_, String>(0);
    assert_eq!(timeout, "5s");
    // The migrator lifts it for its own session, and a second run still takes its lock.
    assert!(store.migrate().await.expect("migrate again").is_empty());
}

/// A database migrated before the schema's history was squashed into one baseline records
/// migrations that are no longer shipped: `migrate` refuses it with what to do, rather than a
/// bare checksum error or, worse, applying the baseline over it. And a function file that changed
/// since the last run is applied again, the others left as they are.
#[tokio::test]
async fn migrate_names_a_database_from_before_the_baseline_and_reapplies_a_changed_function() {
    let (url, _cleanup) = empty_database("fg_test_baseline").await;
    let store = Store::connect(&settings(&[("DATABASE_URL", url.as_str())]).database).unwrap();
    store.migrate().await.expect("migrate");
    let db = connect(&url).await;

    // A changed file (as its text recorded by the last run differing says): run again.
    db.batch_execute(
        "UPDATE fg_sql_function SET body = 'an older text' WHERE name = 'fg_used';
         CREATE OR REPLACE FUNCTION fg_used(p_code text) RETURNS bigint
         LANGUAGE sql STABLE AS $$ SELECT 0::bigint $$;",
    )
    .await
    .unwrap();
    assert!(store.migrate().await.expect("migrate again").is_empty());
    let body: String = db
        .query_one("SELECT prosrc FROM pg_proc WHERE proname = 'fg_used'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(body.contains("sum(used)"), "fg_used applied again: {body}");

    db.batch_execute(
        "INSERT INTO refinery_schema_history (version, name, applied_on, checksum)
         SELECT 99, 'gone', applied_on, '1' FROM refinery_schema_history WHERE version = 1",
    )
    .await
    .unwrap();
    let err = store.migrate().await.unwrap_err();
    assert!(
        matches!(err, shared::store::StoreError::SchemaBeforeBaseline(_)),
        "{err:?}"
    );
    assert!(err.to_string().contains("recreate it"), "{err}");
}
