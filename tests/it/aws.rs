//! What a deployed function reads from AWS at cold start, against a real local endpoint (moto):
//! the database logins from Secrets Manager (the master's and the application role's), and the
//! migrate function's handler.

use lambda_runtime::{Context, LambdaEvent};
use serde_json::json;
use shared::App;

use crate::harness::{postgres_base, settings, sqs_endpoint, unique_name, Cleanup};
use crate::roles::{scram_matches, stored_password};

async fn secrets() -> aws_sdk_secretsmanager::Client {
    let sdk = shared::aws::sdk_config(Some(&sqs_endpoint()), "us-east-1").await;
    aws_sdk_secretsmanager::Client::new(&sdk)
}

async fn create_secret(name: &str, text: &str) -> String {
    secrets()
        .await
        .create_secret()
        .name(name)
        .secret_string(text)
        .send()
        .await
        .expect("create secret")
        .arn()
        .expect("arn")
        .to_owned()
}

#[tokio::test]
async fn the_database_login_comes_from_secrets_manager_and_migrate_applies_the_schema() {
    let db_name = unique_name("fg_test_secret");
    let app_role = unique_name("fg_app");
    // The migrate handler creates the database and the role; they go when the test ends.
    let _cleanup = Cleanup::database(&db_name).and_role(&app_role);
    // A URL whose user does not exist: only the secret's user can log in.
    let base = postgres_base();
    let url = format!(
        "{}/{db_name}",
        base.replacen("postgres@", "no_such_user@", 1)
    );
    assert_ne!(
        url,
        format!("{base}/{db_name}"),
        "the test needs a user in the base URL"
    );
    let arn = create_secret(
        &db_name,
        &json!({"username": "postgres", "password": "unused-under-trust-auth"}).to_string(),
    )
    .await;

    // Without the secret the URL's user is refused...
    let bare = App::new(&settings(&[("DATABASE_URL", url.clone())])).unwrap();
    let err = bare.prepare_database().await.unwrap_err();
    // What an operator reads in the log: the error and its causes.
    let err = shared::telemetry::Chain(&err).to_string();
    assert!(err.contains("no_such_user"), "{err}");

    // ...with it, the migrate function's handler creates the database, applies everything, and
    // creates the application role of the other secret.
    let app_arn = create_secret(
        &format!("{db_name}-app"),
        &json!({"username": app_role, "password": "app-password-from-its-secret"}).to_string(),
    )
    .await;
    let mut with_secret = settings(&[
        ("DATABASE_URL", url.clone()),
        ("DATABASE_SECRET_ARN", arn),
        ("APP_DATABASE_SECRET_ARN", app_arn.clone()),
        ("AWS_ENDPOINT_URL", sqs_endpoint()),
    ]);
    with_secret.resolve_secrets().await.expect("secret read");
    let shown = format!("{with_secret:?}");
    assert!(!shown.contains("unused-under-trust-auth"), "{shown}");
    assert!(!shown.contains("app-password-from-its-secret"), "{shown}");
    let app = App::new(&with_secret).unwrap();
    let event = LambdaEvent::new(json!({}), Context::default());
    let first = shared::lambda::migrate_handler(&app, event.clone())
        .await
        .expect("migrate");
    let applied = first["applied"].as_array().expect("applied list");
    let shipped = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .count();
    assert_eq!(applied.len(), shipped, "{first}");
    let (db, conn) = tokio_postgres::connect(&format!("{base}/{db_name}"), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let verifier = stored_password(&db, &app_role)
        .await
        .expect("the role has a password");
    assert!(scram_matches(&verifier, "app-password-from-its-secret"));

    // The other functions: the application role's secret is their only login, and it serves.
    let mut as_app = settings(&[
        ("DATABASE_URL", url),
        ("DATABASE_SECRET_ARN", app_arn),
        ("AWS_ENDPOINT_URL", sqs_endpoint()),
    ]);
    as_app.resolve_secrets().await.expect("secret read");
    let served = App::new(&as_app).unwrap();
    let code = shared::domain::VoucherCode::parse("NOT-THERE").unwrap();
    let err = served.reservations().voucher(&code).await.unwrap_err();
    assert!(
        matches!(
            err,
            shared::reservations::error::GetVoucherError::NotFound(_)
        ),
        "the voucher table is readable as {app_role}: {err:?}"
    );
    let sessions: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND datname = $2",
            &[&app_role, &db_name],
        )
        .await
        .unwrap()
        .get(0);
    assert!(sessions > 0, "no session as {app_role}");
    // A second invocation (the next deploy) has nothing left to do.
    let second = shared::lambda::migrate_handler(&app, event).await.unwrap();
    assert_eq!(second, json!({"applied": []}));
}

#[tokio::test]
async fn a_missing_or_malformed_secret_is_a_clear_start_up_error() {
    let missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:flashgate-absent-AbCdEf";
    let mut s = settings(&[
        ("DATABASE_SECRET_ARN", missing.to_owned()),
        ("AWS_ENDPOINT_URL", sqs_endpoint()),
    ]);
    let err = s.resolve_secrets().await.unwrap_err().to_string();
    assert!(err.contains("DATABASE_SECRET_ARN"), "{err}");
    assert!(err.contains("could not be read"), "{err}");

    // The application role's secret is read, and reported, the same way.
    let mut s = settings(&[
        ("APP_DATABASE_SECRET_ARN", missing.to_owned()),
        ("AWS_ENDPOINT_URL", sqs_endpoint()),
    ]);
    let err = s.resolve_secrets().await.unwrap_err().to_string();
    assert!(err.contains("APP_DATABASE_SECRET_ARN"), "{err}");
    assert!(err.contains("could not be read"), "{err}");

    let arn = create_secret(&unique_name("flashgate_bad"), "{\"user\": \"hunter2\"}").await;
    let mut s = settings(&[
        ("DATABASE_SECRET_ARN", arn),
        ("AWS_ENDPOINT_URL", sqs_endpoint()),
    ]);
    let err = s.resolve_secrets().await.unwrap_err().to_string();
    assert!(err.contains("is not {\"username\""), "{err}");
    assert!(
        !err.contains("hunter2"),
        "the secret's text must not be echoed: {err}"
    );
}
