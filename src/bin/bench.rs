//! `bench`: reserve on one hot voucher, at a fixed concurrency, strategy against strategy, in
//! one process and one run (a closed model: C workers, each sends its next request when the
//! previous one is answered). It calls the reservation code directly, without HTTP, so the
//! figures compare the decision paths themselves; `GET /health/live` through HTTP is the job
//! of the flash-sale simulator.
//!
//! Strategies:
//! - `standard`: Flashgate's standard mode (`fg_reserve`, one round trip, conditional update);
//! - `naive`: the article's check-then-act (read `used_count`, insert, write back `used + 1`),
//!   which over-allocates under concurrency; it is here to show that it does.
//!
//! Each strategy gets its own voucher with `--limit` uses and `--requests` requests from
//! distinct customers, so the run covers the contended phase and then the sold-out phase.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use clap::Parser;
use hdrhistogram::Histogram;
use shared::domain::{NewVoucher, OrderId, Reserve, VoucherCode};
use shared::errors::ReserveError;
use shared::store::Store;
use shared::Settings;
use tokio_postgres::types::Type;

#[derive(Parser, Debug, Clone)]
#[command(about = "Reserve throughput and latency on one hot voucher, strategy against strategy")]
struct Args {
    /// Requests per strategy.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Uses of each voucher.
    #[arg(long, default_value_t = 5_000)]
    limit: i32,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Postgres connections.
    #[arg(long, default_value_t = 16)]
    pool: usize,
    /// Strategies to run, in order.
    #[arg(long, value_delimiter = ',', default_value = "standard,naive")]
    strategies: Vec<String>,
    /// Postgres server (a fresh database is created on it and dropped afterwards).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432")]
    postgres: String,
}

#[derive(Default)]
struct Tally {
    granted: usize,
    refused: usize,
    errors: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let db = format!("fg_bench_{}", std::process::id());
    let url = format!("{}/{}", args.postgres.trim_end_matches('/'), db);
    let pool = args.pool.to_string();
    let settings = Settings::from_lookup(|k| match k {
        "DATABASE_URL" => Some(url.clone()),
        "DATABASE_POOL_SIZE" => Some(pool.clone()),
        "DATABASE_TIMEOUT_MS" => Some("30000".into()),
        _ => None,
    })?;
    let store = Store::connect(&settings)?;
    store.ensure_database().await?;
    store.migrate().await?;
    let (raw, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);

    println!(
        "one hot voucher, {} uses, {} requests from distinct customers, concurrency {}, {} Postgres connections, {} cores\n",
        args.limit,
        args.requests,
        args.concurrency,
        args.pool,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("| strategy | req/s | p50 ms | p99 ms | max ms | granted | limit | over-allocated |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut failed = false;
    for strategy in &args.strategies {
        let code = VoucherCode::parse(&format!("BENCH-{}", strategy.to_uppercase()))?;
        store
            .create_voucher(&NewVoucher {
                code: code.clone(),
                discount_amount: 100_000,
                min_order_amount: 0,
                total_limit: args.limit,
                per_user_limit: 1,
                starts_at: Utc::now() - chrono::Duration::minutes(1),
                ends_at: Utc::now() + chrono::Duration::hours(1),
                flash_sale: false,
                reservation_ttl_seconds: 900,
            })
            .await?;
        let (elapsed, hist, tally) = match strategy.as_str() {
            "standard" => run(&args, &store, &code, standard).await,
            "naive" => run(&args, &store, &code, naive).await,
            other => anyhow::bail!("unknown strategy {other:?}"),
        };
        let granted: i64 = raw
            .query_one(
                "SELECT count(*) FROM redemption WHERE voucher_code = $1 AND status IN (1, 2)",
                &[&code.as_str()],
            )
            .await?
            .get(0);
        let over = granted - args.limit as i64;
        println!(
            "| {strategy} | {:.0} | {:.2} | {:.2} | {:.2} | {granted} | {} | {} |",
            args.requests as f64 / elapsed.as_secs_f64(),
            hist.value_at_quantile(0.5) as f64 / 1000.0,
            hist.value_at_quantile(0.99) as f64 / 1000.0,
            hist.max() as f64 / 1000.0,
            args.limit,
            over.max(0),
        );
        if tally.errors > 0 {
            eprintln!("{strategy}: {} requests failed", tally.errors);
        }
        let exact = granted == (args.limit as i64).min(args.requests as i64);
        if strategy == "standard" && !exact {
            eprintln!(
                "standard mode allocated {granted}, expected exactly {}",
                args.limit
            );
            failed = true;
        }
        debug_assert!(tally.granted + tally.refused + tally.errors == args.requests);
    }
    drop(store);
    raw.batch_execute("SELECT 1").await?;
    let (admin, conn) = tokio_postgres::connect(
        &format!("{}/postgres", args.postgres.trim_end_matches('/')),
        tokio_postgres::NoTls,
    )
    .await?;
    tokio::spawn(conn);
    drop(raw);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)"))
        .await;
    if failed {
        anyhow::bail!("allocation was not exact");
    }
    Ok(())
}

/// What one request did: granted a use, was refused, or failed.
enum Answer {
    Granted,
    Refused,
    Error,
}

async fn standard(store: Store, code: VoucherCode, i: usize) -> Answer {
    let req = Reserve {
        code,
        order_id: OrderId::parse(&format!("o-{i}")).unwrap(),
        customer_id: i as i64 + 1,
        order_amount: 500_000,
    };
    match store
        .reserve(&req, shared::domain::millis(Utc::now()))
        .await
    {
        Ok(_) => Answer::Granted,
        Err(ReserveError::OutOfStock | ReserveError::AlreadyUsed) => Answer::Refused,
        Err(_) => Answer::Error,
    }
}

/// The article's naive version: check, then act, in separate statements.
async fn naive(store: Store, code: VoucherCode, i: usize) -> Answer {
    let result = async {
        let client = store.raw_client().await?;
        let row = client
            .query_typed(
                "SELECT used_count, total_limit, discount_amount FROM voucher WHERE code = $1",
                &[(&code.as_str(), Type::TEXT)],
            )
            .await?
            .into_iter()
            .next()
            .context("no voucher")?;
        let (used, total, discount): (i32, i32, i64) = (row.get(0), row.get(1), row.get(2));
        if used >= total {
            return Ok(false);
        }
        let now = Utc::now();
        let order = format!("o-{i}");
        let customer = i as i64 + 1;
        client
            .query_typed(
                "INSERT INTO redemption (voucher_code, order_id, customer_id, status, order_amount,
                                         discount_amount, reserved_at, expires_at)
                 VALUES ($1, $2, $3, 1, 500000, $4, $5, $5 + interval '15 minutes')",
                &[
                    (&code.as_str(), Type::TEXT),
                    (&order, Type::TEXT),
                    (&customer, Type::INT8),
                    (&discount, Type::INT8),
                    (&now, Type::TIMESTAMPTZ),
                ],
            )
            .await?;
        let next = used + 1;
        client
            .query_typed(
                "UPDATE voucher SET used_count = $2 WHERE code = $1",
                &[(&code.as_str(), Type::TEXT), (&next, Type::INT4)],
            )
            .await?;
        anyhow::Ok(true)
    };
    match result.await {
        Ok(true) => Answer::Granted,
        Ok(false) => Answer::Refused,
        Err(_) => Answer::Error,
    }
}

async fn run<F, Fut>(
    args: &Args,
    store: &Store,
    code: &VoucherCode,
    op: F,
) -> (Duration, Histogram<u64>, Tally)
where
    F: Fn(Store, VoucherCode, usize) -> Fut + Copy + Send + 'static,
    Fut: std::future::Future<Output = Answer> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (next, store, code, total) =
                (next.clone(), store.clone(), code.clone(), args.requests);
            tokio::spawn(async move {
                let mut hist = Histogram::<u64>::new(3).unwrap();
                let mut tally = Tally::default();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let t = Instant::now();
                    match op(store.clone(), code.clone(), i).await {
                        Answer::Granted => tally.granted += 1,
                        Answer::Refused => tally.refused += 1,
                        Answer::Error => tally.errors += 1,
                    }
                    hist.record(t.elapsed().as_micros() as u64).unwrap();
                }
                (hist, tally)
            })
        })
        .collect();
    let mut hist = Histogram::<u64>::new(3).unwrap();
    let mut tally = Tally::default();
    for w in workers {
        let (h, t) = w.await.unwrap();
        hist.add(h).unwrap();
        tally.granted += t.granted;
        tally.refused += t.refused;
        tally.errors += t.errors;
    }
    (started.elapsed(), hist, tally)
}
