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
