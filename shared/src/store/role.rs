//! The application role: the least-privilege login every function but `migrate` uses in AWS
//! (`APP_DATABASE_SECRET_ARN`, docs/DEPLOY.md "Database logins").
//!
//! `migrate` creates it, or sets its password to the secret's, and grants it exactly what the
//! service does: connect, use the schema, read, insert and update the service's tables (delete
//! only where it deletes, [`DELETES_FROM`]), use their sequences, call the `fg_*` functions. It
//! owns nothing and may create nothing, so a bug or an injection in the request path cannot
//! change the schema nor erase a record, and the migrations' history is out of its reach.
//!
//! The grants are made again on every run rather than left to default privileges: `migrate`
//! runs after each deploy, and a release never uses a table or function its own migration adds
//! (docs/DEPLOY.md, "Later deploys"), so everything a migration creates is granted before any
//! code needs it. Re-granting also takes back what anyone added by hand, whichever role created
//! the objects, and leaves no default-privilege entries behind that depend on the role.

use postgres_protocol::escape::{escape_identifier, escape_literal};
use secrecy::ExposeSecret;
use tokio_postgres::types::Type;

use super::StoreError;
use crate::config::DatabaseCredentials;

/// The tables the service deletes rows from: customer counters back at zero (the triggers
/// `fg_forget_idle_customer` and `fg_forget_idle_campaign_customer` run as the caller), rules no
/// event can still need (the sweeper, both tables) and counter slots a change of
/// `counterSlots` removes (`fg_change_slots`, which runs as the caller), settled orders of
/// several codes past their keeping (the sweeper). Every other table is
/// only read, inserted and updated.
pub const DELETES_FROM: &[&str] = &[
    "campaign_customer",
    "campaign_rules",
    "customer_order",
    "voucher_customer",
    "voucher_rules",
    "voucher_slot",
];

/// Creates or updates the role and makes its privileges exactly the service's, in one
/// transaction: a function logging in meanwhile sees the old grants or the new, never none.
/// Runs on the migrator's session, under its advisory lock. (That lock is the database's; two
/// databases of one server configured with one role name could race on CREATE ROLE, and the
/// loser fails without a change: run it again.)
pub(super) async fn provision(
    client: &mut tokio_postgres::Client,
    role: &DatabaseCredentials,
) -> Result<(), StoreError> {
    let name = role.username.as_str();
    let refuse = |problem: &'static str| StoreError::AppRole {
        role: name.to_owned(),
        problem,
    };
    check_name(name).map_err(refuse)?;
    let tx = client.transaction().await?;
    let here = tx
        .query_typed(
            "SELECT current_user::text, current_database()::text, current_schema()::text",
            &[],
        )
        .await?;
    let here = here.first().ok_or(StoreError::NoRow)?;
    let (migrator, database, schema): (String, String, String) =
        (here.get(0), here.get(1), here.get(2));
    if name == migrator {
        // ALTER ROLE below would change the master password behind its secret's back.
        return Err(refuse(
            "is the login migrate runs as; give the application its own",
        ));
    }
    let existing = tx
        .query_typed(
            "SELECT r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolreplication
                    OR r.rolbypassrls,
                    EXISTS (SELECT 1 FROM pg_auth_members m WHERE m.member = r.oid),
                    EXISTS (SELECT 1 FROM pg_database d
                             WHERE d.datname = current_database() AND d.datdba = r.oid)
                 OR EXISTS (SELECT 1 FROM pg_namespace n WHERE n.nspowner = r.oid)
                 OR EXISTS (SELECT 1 FROM pg_class c WHERE c.relowner = r.oid)
                 OR EXISTS (SELECT 1 FROM pg_proc p WHERE p.proowner = r.oid)
               FROM pg_roles r WHERE r.rolname = $1",
            &[(&name, Type::TEXT)],
        )
        .await?;
    // An existing role is never given or stripped of attributes here: on RDS the migrator is
    // no superuser, and Postgres lets only a superuser mention SUPERUSER, REPLICATION or
    // BYPASSRLS in ALTER ROLE. One with more than the service's needs is refused instead.
    if let Some(row) = existing.first() {
        if row.get::<_, bool>(0) {
            return Err(refuse(
                "has attributes beyond LOGIN (SUPERUSER, CREATEROLE, CREATEDB, REPLICATION or \
                 BYPASSRLS); remove them",
            ));
        }
        if row.get::<_, bool>(1) {
            return Err(refuse(
                "is a member of other roles, whose privileges it would inherit; revoke them",
            ));
        }
        if row.get::<_, bool>(2) {
            return Err(refuse(
                "owns the database or objects in it, so it could change them; reassign them",
            ));
        }
    }

    // The password goes as a SCRAM verifier computed here, as psql's \password does: the
    // statement, which the server may log (log_statement = 'ddl'), never holds it in clear.
    let verifier =
        postgres_protocol::password::scram_sha_256(role.password.expose_secret().as_bytes());
    let r = escape_identifier(name);
    let login = if existing.is_empty() {
        // Spelled out: these are the defaults, and the role must never have more.
        format!(
            "CREATE ROLE {r} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION \
             NOBYPASSRLS PASSWORD {}",
            escape_literal(&verifier)
        )
    } else {
        format!(
            "ALTER ROLE {r} WITH LOGIN PASSWORD {}",
            escape_literal(&verifier)
        )
    };
    tx.batch_execute(&login).await?;

    let (db, s) = (escape_identifier(&database), escape_identifier(&schema));
    let deletes = DELETES_FROM
        .iter()
        .map(|t| format!("{s}.{}", escape_identifier(t)))
        .collect::<Vec<_>>()
        .join(", ");
    tx.batch_execute(&format!(
        "REVOKE ALL ON DATABASE {db} FROM {r};
         GRANT CONNECT ON DATABASE {db} TO {r};
         REVOKE ALL ON SCHEMA {s} FROM {r};
         GRANT USAGE ON SCHEMA {s} TO {r};
         -- Postgres 15's default, made sure of: before it every role could create tables in
         -- the public schema. The owner, the migrator, keeps CREATE.
         REVOKE CREATE ON SCHEMA {s} FROM PUBLIC;
         REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM {r};
         GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA {s} TO {r};
         -- DELETE only where the service deletes: an injection cannot erase the records.
         GRANT DELETE ON TABLE {deletes} TO {r};
         -- Nor keep tables of its own, even temporary ones (the owner keeps TEMP).
         REVOKE TEMPORARY ON DATABASE {db} FROM PUBLIC;
         -- The migrations' own records: the service never reads them.
         REVOKE ALL ON TABLE {s}.refinery_schema_history FROM {r};
         REVOKE ALL ON TABLE {s}.fg_sql_function FROM {r};
         REVOKE ALL ON ALL SEQUENCES IN SCHEMA {s} FROM {r};
         GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {s} TO {r};
         REVOKE ALL ON ALL ROUTINES IN SCHEMA {s} FROM {r};
         GRANT EXECUTE ON ALL ROUTINES IN SCHEMA {s} TO {r};"
    ))
    .await?;
    tx.commit().await?;
    // The name only: the password, even hashed, stays out of the log.
    tracing::info!(role = %name, created = existing.is_empty(), "application role up to date");
    Ok(())
}

/// A plain lower-case identifier that is not reserved: what an operator would type, and what
/// reads the same quoted or not. Quoting alone would make any text safe in the statements, but
/// a name like `Flashgate` or `pg_app` is a mistake to report, not a role to create.
pub fn check_name(name: &str) -> Result<(), &'static str> {
    let mut chars = name.chars();
    if !chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
    {
        return Err("must start with a lower-case letter or an underscore");
    }
    if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        return Err("may hold only lower-case letters, digits and underscores");
    }
    // NAMEDATALEN - 1: Postgres would cut a longer name short, silently.
    if name.len() > 63 {
        return Err("is longer than 63 characters");
    }
    // Postgres reserves pg_ for its own roles; RDS reserves rds.
    if name.starts_with("pg_") || name.starts_with("rds") || name == "public" {
        return Err("is a name Postgres or RDS reserves");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn only_plain_lower_case_identifiers_name_the_role() {
        for good in ["flashgate_app", "_app", "app2", &"a".repeat(63)] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "2app",
            "Flashgate",
            "app-role",
            "app role",
            "app\"; DROP TABLE redemption; --",
            "app'",
            "pg_app",
            "rdsadmin",
            "public",
            "flashgate_äpp",
            &"a".repeat(64),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
