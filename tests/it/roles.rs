//! The application role: `migrate` creates it from its secret (`APP_DATABASE_SECRET_ARN`) and
//! grants it exactly the service's privileges; the service works logged in as it, and the
//! schema is out of its reach. Roles belong to the whole Postgres server, so each test names
//! its own and drops it at the end ([`Cleanup::and_role`]).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use reqwest::StatusCode;
use serde_json::json;
use sha2::Sha256;
use shared::store::StoreError;
use shared::App;
use tokio_postgres::error::SqlState;

use crate::harness::{app_role_login, settings, unique_name, Cleanup, TestApp, APP_ROLE_PASSWORD};

/// A session on the test's database logged in as `role`.
async fn connect_as(app: &TestApp, role: &str) -> tokio_postgres::Client {
    let mut config: tokio_postgres::Config = app.database_url().parse().unwrap();
    config.user(role);
    let (client, connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("log in as {role}: {e}"));
    tokio::spawn(connection);
    client
}

/// A migrator of the test's database, as the migrate function is set up: its own login (the
/// test server's superuser) and the application role's secret.
fn migrator(app: &TestApp, role: &str, password: &str) -> App {
    let mut s = settings(&[("DATABASE_URL", app.database_url())]);
    s.database.app_role = Some(app_role_login(role, password));
    App::new(&s).unwrap()
}

/// The password hash Postgres keeps for `role` (None: no password).
pub async fn stored_password(db: &tokio_postgres::Client, role: &str) -> Option<String> {
    db.query_one(
        "SELECT rolpassword FROM pg_authid WHERE rolname = $1",
        &[&role],
    )
    .await
    .unwrap_or_else(|e| panic!("role {role}: {e}"))
    .get(0)
}

/// Whether `password` logs in against the SCRAM verifier `verifier` (the test server trusts
/// every local login, so a real login would not tell). A SCRAM exchange with the verifier in
/// the server's part: the client's final check passes only if the password derives the
/// verifier's server key.
pub fn scram_matches(verifier: &str, password: &str) -> bool {
    // SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>
    let rest = verifier
        .strip_prefix("SCRAM-SHA-256$")
        .unwrap_or_else(|| panic!("not a SCRAM verifier: {verifier}"));
    let (iterations_salt, keys) = rest.split_once('$').expect("two parts");
    let (iterations, salt) = iterations_salt.split_once(':').expect("iterations:salt");
    let server_key = STANDARD
        .decode(keys.split_once(':').expect("StoredKey:ServerKey").1)
        .unwrap();

    let mut client = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
    let first = String::from_utf8(client.message().to_vec()).unwrap();
    let first_bare = first.strip_prefix("n,,").expect("gs2 header");
    let nonce = first_bare.strip_prefix("n=,r=").expect("client nonce");
    let server_first = format!("r={nonce}server,s={salt},i={iterations}");
    client.update(server_first.as_bytes()).unwrap();
    let last = String::from_utf8(client.message().to_vec()).unwrap();
    let last_without_proof = last.split_once(",p=").expect("a proof").0;
    let auth_message = format!("{first_bare},{server_first},{last_without_proof}");
    let mut mac = Hmac::<Sha256>::new_from_slice(&server_key).unwrap();
    mac.update(auth_message.as_bytes());
    let signature = STANDARD.encode(mac.finalize().into_bytes());
    client.finish(format!("v={signature}").as_bytes()).is_ok()
}

/// What `role` was granted in the test's database, one `kind name: PRIVILEGE` line each,
/// sorted: the database, the schema, each relation (table or sequence) and each function.
async fn grants(db: &tokio_postgres::Client, role: &str) -> Vec<String> {
    db.query(
        "WITH g AS (
             SELECT 'database ' || datname AS object, (aclexplode(datacl)).*
               FROM pg_database WHERE datname = current_database()
             UNION ALL
             SELECT 'schema ' || nspname, (aclexplode(nspacl)).*
               FROM pg_namespace WHERE nspname = current_schema()
             UNION ALL
             SELECT CASE relkind WHEN 'S' THEN 'sequence ' ELSE 'table ' END || relname,
                    (aclexplode(relacl)).*
               FROM pg_class WHERE relnamespace = current_schema()::regnamespace
             UNION ALL
             SELECT 'function ' || proname, (aclexplode(proacl)).*
               FROM pg_proc WHERE pronamespace = current_schema()::regnamespace
         )
         SELECT object || ': ' || privilege_type FROM g
          WHERE grantee = (SELECT oid FROM pg_roles WHERE rolname = $1)
          ORDER BY 1",
        &[&role],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| row.get(0))
    .collect()
}

/// What the service needs, from the catalog: CONNECT, USAGE on the schema, read, insert and
/// update on every table but the migrations' records, delete on those it deletes from, USAGE and SELECT on every sequence, EXECUTE on
/// every function.
async fn the_services_grants(db: &tokio_postgres::Client) -> Vec<String> {
    db.query(
        "WITH o AS (
             SELECT 'database ' || current_database() AS object, 'CONNECT' AS privilege
             UNION ALL SELECT 'schema ' || current_schema(), 'USAGE'
             UNION ALL
             SELECT 'table ' || relname, p
               FROM pg_class, unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS p
              WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'p', 'v')
                AND relname NOT IN ('refinery_schema_history', 'fg_sql_function')
                AND (p <> 'DELETE' OR relname IN ('campaign_customer', 'campaign_rules',
                                                  'customer_order', 'voucher_customer',
                                                  'voucher_rules', 'voucher_slot'))
             UNION ALL
             SELECT 'sequence ' || relname, p
               FROM pg_class, unnest(ARRAY['USAGE', 'SELECT']) AS p
              WHERE relnamespace = current_schema()::regnamespace AND relkind = 'S'
             UNION ALL
             SELECT 'function ' || proname, 'EXECUTE'
               FROM pg_proc WHERE pronamespace = current_schema()::regnamespace
         )
         SELECT object || ': ' || privilege FROM o ORDER BY 1",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| row.get(0))
    .collect()
}

#[tokio::test]
async fn the_service_runs_as_the_application_role_migrate_creates() {
    let app = TestApp::builder().with_app_role().spawn().await;
    let role = app.app_role();

    // A login, with no attribute beyond it.
    let attributes = app
        .db
        .query_one(
            "SELECT rolcanlogin, rolsuper OR rolcreatedb OR rolcreaterole OR rolreplication
                    OR rolbypassrls
               FROM pg_roles WHERE rolname = $1",
            &[&role],
        )
        .await
        .expect("migrate created the role");
    assert!(attributes.get::<_, bool>(0), "it may log in");
    assert!(!attributes.get::<_, bool>(1), "it has no other attribute");
    // Exactly the service's privileges, and the password of its secret.
    let granted = grants(&app.db, role).await;
    assert!(granted.iter().any(|g| g.starts_with("table redemption")));
    assert_eq!(granted, the_services_grants(&app.db).await);
    let verifier = stored_password(&app.db, role).await.expect("a password");
    assert!(scram_matches(&verifier, APP_ROLE_PASSWORD));

    // The whole service on that login: a standard voucher, a flash one, every write path.
    app.voucher("ROLE-STD", 5, json!({})).await;
    app.voucher("ROLE-FLASH", 5, json!({"flashSale": true}))
        .await;
    assert_eq!(app.warmup("ROLE-FLASH").await.0, StatusCode::OK);
    for code in ["ROLE-STD", "ROLE-FLASH"] {
        let (status, body) = app.reserve(code, 1, "kept", 10).await;
        assert_eq!(status, StatusCode::CREATED, "{code}: {body}");
        let (status, body) = app.confirm(code, "kept").await;
        assert_eq!(status, StatusCode::OK, "{code}: {body}");
        let (status, body) = app.reserve(code, 2, "dropped", 10).await;
        assert_eq!(status, StatusCode::CREATED, "{code}: {body}");
        let (status, body) = app.release(code, "dropped").await;
        assert!(status.is_success(), "{code}: {status} {body}");
        let (status, body) = app.get_reservation(code, "kept").await;
        assert_eq!(
            (status, &body["status"]),
            (StatusCode::OK, &json!("CONFIRMED"))
        );
        assert_eq!(app.view(code).await["usedCount"], 1);
    }
    let (status, body) = app
        .patch_voucher("ROLE-STD", json!({"totalLimit": 8}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // More counter slots, then fewer (the empty ones are deleted), and a money budget.
    for change in [
        json!({"counterSlots": 4}),
        json!({"counterSlots": 2}),
        json!({"budgetAmount": 1_000}),
    ] {
        let (status, body) = app.patch_voucher("ROLE-STD", change.clone()).await;
        assert_eq!(status, StatusCode::OK, "{change}: {body}");
    }
    app.app.sweeper().sweep().await.expect("sweep");
    let (status, body) = app.health().await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // ...and it is the role's sessions that did it.
    let sessions: i64 = app
        .db
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND datname = $2",
            &[&role, &app.db_name],
        )
        .await
        .unwrap()
        .get(0);
    assert!(sessions > 0, "the server holds no session as {role}");

    // The database's statement timeout (set by the baseline) holds for it as for every login.
    let session = connect_as(&app, role).await;
    let row = session
        .query_one(
            "SELECT current_user::text, current_setting('statement_timeout')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), role);
    assert_eq!(row.get::<_, String>(1), "5s");
}

#[tokio::test]
async fn the_application_role_cannot_change_the_schema() {
    let app = TestApp::builder().with_app_role().spawn().await;
    let role = app.app_role();
    let session = connect_as(&app, role).await;
    // What it may do, so that the refusals below are about privileges, not a broken login.
    session
        .batch_execute("SELECT count(*) FROM redemption; SELECT count(*) FROM voucher")
        .await
        .expect("reads");

    for statement in [
        "CREATE TABLE intruder (id int)".to_owned(),
        "DROP TABLE redemption".to_owned(),
        "ALTER TABLE voucher ADD COLUMN intruder int".to_owned(),
        "TRUNCATE redemption".to_owned(),
        "CREATE INDEX intruder ON redemption (order_id)".to_owned(),
        "CREATE FUNCTION intruder() RETURNS int LANGUAGE sql AS 'SELECT 1'".to_owned(),
        "DROP FUNCTION fg_used".to_owned(),
        "CREATE SCHEMA intruder".to_owned(),
        "CREATE ROLE intruder".to_owned(),
        format!("ALTER ROLE \"{role}\" CREATEDB"),
        format!("ALTER DATABASE \"{}\" RESET statement_timeout", app.db_name),
        "SET ROLE postgres".to_owned(),
        "SELECT * FROM refinery_schema_history".to_owned(),
        "DELETE FROM refinery_schema_history".to_owned(),
        "UPDATE fg_sql_function SET body = ''".to_owned(),
        "DELETE FROM redemption".to_owned(),
        "DELETE FROM voucher".to_owned(),
        "CREATE TEMP TABLE intruder (id int)".to_owned(),
    ] {
        let err = session
            .batch_execute(&statement)
            .await
            .expect_err(&statement);
        assert_eq!(
            err.code(),
            Some(&SqlState::INSUFFICIENT_PRIVILEGE),
            "{statement}: {err}"
        );
    }
    // Nothing changed behind a refusal.
    let (status, body) = app.still_serves().await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

impl TestApp {
    /// A voucher and one reserve of it, through the server: the answer.
    async fn still_serves(&self) -> (StatusCode, String) {
        self.voucher("STILL-THERE", 2, json!({})).await;
        self.reserve("STILL-THERE", 1, "after", 10).await
    }
}

#[tokio::test]
async fn migrate_again_sets_the_new_password_and_takes_back_extra_grants() {
    let app = TestApp::builder().with_app_role().spawn().await;
    let role = app.app_role();
    let exact = the_services_grants(&app.db).await;
    assert_eq!(grants(&app.db, role).await, exact);
    // Someone granted it more by hand.
    app.db
        .batch_execute(&format!(
            "GRANT TRUNCATE, TRIGGER ON redemption TO \"{role}\";
             GRANT CREATE ON SCHEMA public TO \"{role}\";
             GRANT CREATE, TEMPORARY ON DATABASE \"{}\" TO \"{role}\";
             GRANT SELECT ON refinery_schema_history TO \"{role}\"",
            app.db_name
        ))
        .await
        .unwrap();
    assert_ne!(grants(&app.db, role).await, exact);

    // The secret was rotated: two migrators at once (the deploy's invocation and a retry)
    // both succeed, with nothing left to apply.
    let new_password = "second-app-password";
    let (one, two) = (
        migrator(&app, role, new_password),
        migrator(&app, role, new_password),
    );
    let (one, two) = tokio::join!(one.prepare_database(), two.prepare_database());
    assert_eq!(one.expect("first migrator"), Vec::<String>::new());
    assert_eq!(two.expect("second migrator"), Vec::<String>::new());

    let verifier = stored_password(&app.db, role).await.expect("a password");
    assert!(scram_matches(&verifier, new_password));
    assert!(!scram_matches(&verifier, APP_ROLE_PASSWORD));
    assert_eq!(grants(&app.db, role).await, exact);
    // The re-grant left the service what it needs.
    let (status, body) = app.still_serves().await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn migrate_refuses_an_application_role_that_is_not_least_privilege() {
    let powerful = unique_name("fg_app");
    let member = unique_name("fg_app");
    // Before the app: dropped after its database, which holds any grant a bug gave them.
    let _cleanup = (Cleanup::role(&powerful), Cleanup::role(&member));
    let app = TestApp::spawn().await;
    app.db
        .batch_execute(&format!(
            "CREATE ROLE \"{powerful}\" LOGIN CREATEDB;
             CREATE ROLE \"{member}\" LOGIN IN ROLE pg_read_all_data"
        ))
        .await
        .unwrap();
    let me: String = app
        .db
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    let migrator_password = stored_password(&app.db, &me).await;

    for (name, problem) in [
        (me.as_str(), "is the login migrate runs as"),
        ("Flashgate\"; DROP TABLE redemption; --", "must start with"),
        ("pg_app", "reserves"),
        (powerful.as_str(), "has attributes beyond LOGIN"),
        (member.as_str(), "is a member of other roles"),
    ] {
        let err = migrator(&app, name, "never-set")
            .prepare_database()
            .await
            .expect_err(name);
        assert!(matches!(err, StoreError::AppRole { .. }), "{name}: {err:?}");
        assert!(err.to_string().contains(problem), "{name}: {err}");
    }
    // None of them was given the password, the migrator's own least of all.
    assert_eq!(stored_password(&app.db, &me).await, migrator_password);
    for role in [&powerful, &member] {
        assert_eq!(stored_password(&app.db, role).await, None, "{role}");
        assert_eq!(grants(&app.db, role).await, Vec::<String>::new(), "{role}");
    }
}
