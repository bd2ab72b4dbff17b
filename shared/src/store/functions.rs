//! The SQL functions: each is defined in one file of `sql/functions/` (with the triggers that
//! call it), and [`apply`] runs the files after the versioned migrations, in name order, each in
//! a transaction of its own. A file runs again only when its text changed since it last ran
//! (`fg_sql_function`, the migrator's bookkeeping beside refinery's history), so a deploy that
//! changes one function touches only that one, and an unchanged trigger is never recreated under
//! a sale's traffic.
//!
//! A file holds `CREATE OR REPLACE FUNCTION`, so it can change a body and its settings, not the
//! function's arguments or result: such a change drops the old function in a versioned
//! migration first. A function that goes is dropped by a migration too, and its file deleted.
//! Versioned migrations run before the functions exist on a new database, so none may call one.

macro_rules! function {
    ($name:literal) => {
        (
            $name,
            include_str!(concat!("../../../sql/functions/", $name, ".sql")),
        )
    };
}

/// Every file of `sql/functions/`, by the function's name (a unit test keeps the list whole).
pub(super) const FUNCTIONS: &[(&str, &str)] = &[
    function!("fg_campaign_budget_unused"),
    function!("fg_change_slots"),
    function!("fg_check_slot_caps"),
    function!("fg_discount"),
    function!("fg_expire"),
    function!("fg_forget_idle_campaign_customer"),
    function!("fg_forget_idle_customer"),
    function!("fg_merge"),
    function!("fg_merge_batch"),
    function!("fg_merge_set"),
    function!("fg_merge_strict"),
    function!("fg_merge_winners"),
    function!("fg_move_budgets"),
    function!("fg_patch_campaign"),
    function!("fg_patch_voucher"),
    function!("fg_recover_orphan"),
    function!("fg_reserve"),
    function!("fg_reserve_batch"),
    function!("fg_reserve_strict"),
    function!("fg_resize_slots"),
    function!("fg_set_slots"),
    function!("fg_slot_campaign_fixed"),
    function!("fg_slot_room"),
    function!("fg_take_slot"),
    function!("fg_used"),
    function!("fg_validate"),
];

/// Runs the function files whose text differs from what last ran; answers their names.
pub(super) async fn apply(
    client: &mut tokio_postgres::Client,
) -> Result<Vec<&'static str>, tokio_postgres::Error> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS fg_sql_function (
                 name TEXT PRIMARY KEY,
                 body TEXT NOT NULL,
                 applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
             )",
        )
        .await?;
    let mut applied = Vec::new();
    for (name, body) in FUNCTIONS {
        let tx = client.transaction().await?;
        let same = tx
            .query_opt(
                "SELECT 1 FROM fg_sql_function WHERE name = $1 AND body = $2",
                &[name, body],
            )
            .await?
            .is_some();
        if same {
            continue;
        }
        tx.batch_execute(body).await?;
        tx.execute(
            "INSERT INTO fg_sql_function (name, body) VALUES ($1, $2)
             ON CONFLICT (name) DO UPDATE SET body = EXCLUDED.body, applied_at = now()",
            &[name, body],
        )
        .await?;
        tx.commit().await?;
        applied.push(*name);
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::FUNCTIONS;

    /// Every file of `sql/functions/` is applied, and each defines the one function it is named
    /// after (no other file, migrations included, defines one).
    #[test]
    fn every_function_file_is_applied_and_defines_its_function_alone() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files: Vec<String> = std::fs::read_dir(root.join("sql/functions"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        let listed: Vec<String> = FUNCTIONS.iter().map(|(n, _)| format!("{n}.sql")).collect();
        assert_eq!(files, listed, "sql/functions/ and FUNCTIONS differ");
        let defines = |text: &str| -> Vec<String> {
            text.match_indices("FUNCTION ")
                .filter(|(i, _)| {
                    text[..*i].trim_end().ends_with("CREATE OR REPLACE")
                        || text[..*i].trim_end().ends_with("CREATE")
                })
                .map(|(i, _)| {
                    text[i + 9..]
                        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .next()
                        .unwrap()
                        .to_owned()
                })
                .collect()
        };
        for (name, body) in FUNCTIONS {
            assert_eq!(
                defines(body),
                vec![name.to_string()],
                "sql/functions/{name}.sql"
            );
        }
        for entry in std::fs::read_dir(root.join("migrations")).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            assert_eq!(defines(&text), Vec::<String>::new(), "{}", path.display());
        }
    }
}
