//! `flashgate`: the local server and the operator's command line.
//!
//! `serve` runs the whole HTTP API, the same router the Lambda functions mount; `migrate`
//! applies the schema and exits; `sweep` runs the sweeper once; `warmup CODE` loads a flash-sale
//! voucher into Redis; `openapi` prints the API's OpenAPI document (docs/openapi.json is its
//! output).

use anyhow::Context;
use clap::{Parser, Subcommand};
use shared::domain::VoucherCode;
use shared::{server, telemetry, App, Settings};

#[derive(Parser)]
#[command(
    name = "flashgate",
    version,
    about = "Voucher reservations that never over-allocate"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply pending migrations, then serve the whole HTTP API on 127.0.0.1:$PORT.
    Serve {
        /// Address to bind.
        #[arg(long, env = "HOST", default_value = "127.0.0.1")]
        host: String,
    },
    /// Create the database if missing, apply pending migrations and exit.
    Migrate,
    /// Run one sweep (expiry, orphan recovery, reconciliation, warm-up) and exit.
    Sweep,
    /// Load a flash-sale voucher into Redis from Postgres (before its sale starts).
    Warmup {
        /// Voucher code (case-insensitive).
        code: String,
    },
    /// Print the API's OpenAPI document, generated from the route table and the types
    /// (`cargo run -- openapi > docs/openapi.json` writes the committed copy).
    Openapi,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::Openapi = cli.command {
        // Needs no settings and no service: the document is built from the code.
        print!("{}", shared::http::openapi::json());
        return Ok(());
    }
    telemetry::init();
    let settings = Settings::load().await?;
    let app = App::new(&settings)?;
    match cli.command {
        Command::Migrate => {
            app.prepare_database().await.context("migrate")?;
            app.prepare_events().await.context("event topics")?;
            tracing::info!("database is up to date");
        }
        Command::Sweep => {
            let report = app.sweeper().sweep().await.context("sweep")?;
            println!("{}", serde_json::to_string(&report)?);
        }
        Command::Warmup { code } => {
            let code = VoucherCode::parse(&code)?;
            let warmed = app.reservations().warm(&code).await.context("warm-up")?;
            println!("{}", serde_json::to_string(&warmed)?);
        }
        Command::Openapi => unreachable!("printed above"),
        Command::Serve { host } => {
            // Before anything records: `GET /metrics` shows what this process saw.
            telemetry::prometheus::install();
            app.prepare_database()
                .await
                .context("migrate before serving")?;
            app.prepare_events()
                .await
                .context("event queue or topics before serving")?;
            let (listener, addr) = server::bind(&host, settings.server.port)
                .await
                .with_context(|| format!("bind {host}:{}", settings.server.port))?;
            server::exposure(&addr, &settings.server).map_err(anyhow::Error::msg)?;
            tracing::info!(%addr, url = %format!("http://{addr}"), "listening");
            server::serve(
                listener,
                app,
                server::Background::from_settings(&settings),
                settings.server.clone(),
                shutdown_signal(),
            )
            .await?;
            tracing::info!("stopped");
        }
    }
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
