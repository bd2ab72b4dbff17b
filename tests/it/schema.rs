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

/// V7 moved the voucher view's counts from count(*) over redemptions to counters on the slots:
/// a database with history before V7 must come out of it with the counts it had.
#[tokio::test]
async fn v7_counts_the_history_written_before_it() {
    let (url, _cleanup) = empty_database("fg_test_v7").await;
    let client = connect(&url).await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    for file in [
        "V1__schema.sql",
        "V2__sweeper.sql",
        "V3__counter_slots.sql",
        "V4__batches.sql",
        "V5__voucher_lifecycle.sql",
        "V6__discount_within_order.sql",
    ] {
        let sql = std::fs::read_to_string(root.join(file)).unwrap();
        client.batch_execute(&sql).await.expect(file);
    }
    // Two uses left reserved, two confirmed (one of them in the same merge as its reserve), one
    // released after confirming, one revoked (the per-user limit refuses it).
    client
        .batch_execute(
            "INSERT INTO voucher (code, discount_amount, total_limit, per_user_limit, starts_at,
                                  ends_at, counter_slots)
             VALUES ('V7', 10, 100, 1, now() - interval '1 hour', now() + interval '1 hour', 4);
             SELECT fg_set_slots('V7', 100, 4::smallint);
             SELECT fg_merge('V7', o, c, s::smallint, 1000, 10, now(), now() + interval '1 hour',
                             NULL, now(), true)
               FROM (VALUES ('o1', 1, 1), ('o2', 2, 1), ('o3', 3, 1), ('o3', 3, 2),
                            ('o4', 4, 2), ('o5', 5, 1), ('o5', 5, 2), ('o5', 5, 3),
                            ('o6', 1, 1)) AS m(o, c, s);",
        )
        .await
        .unwrap();
    let sql = std::fs::read_to_string(root.join("V7__merge_counts_and_expiry.sql")).unwrap();
    client.batch_execute(&sql).await.expect("V7");

    let counts = client
        .query_one(
            "SELECT sum(used)::int8, sum(confirmed)::int8, sum(revoked)::int8,
                    (SELECT count(*) FROM redemption WHERE status = 1),
                    (SELECT count(*) FROM redemption WHERE status = 2),
                    (SELECT count(*) FROM redemption WHERE release_reason = 'REVOKED')
               FROM voucher_slot WHERE voucher_code = 'V7'",
            &[],
        )
        .await
        .unwrap();
    let got: Vec<i64> = (0..6).map(|i| counts.get(i)).collect();
    // used = reserved + confirmed; the slots' counts equal the rows'.
    assert_eq!(got, vec![4, 2, 1, 2, 2, 1]);
}
