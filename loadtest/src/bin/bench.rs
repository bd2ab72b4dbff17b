//! `bench`: reserve on one hot voucher, strategy against strategy, in one process and one run.
//!
//! A closed model at a fixed concurrency: C workers, each sends its next request when the
//! previous one is answered. It calls the service's own reserve (`Reservations::reserve`, the code the
//! HTTP handler runs) without HTTP, so the figures compare the decision paths themselves; the
//! HTTP stack's ceiling is measured by the flash-sale simulator.
//!
//! Each strategy gets a fresh voucher with `--limit` uses and runs two phases:
//! - `sale`: `--limit` requests from distinct customers, every one of which should win;
//! - `sold out`: `--sold-out` more requests, every one of which should be refused.
//!
//! Strategies (each with an optional `:K`, the counter slots its voucher's limit is split into;
//! without it, the service's own choice from the limit):
//! - `standard`: a standard voucher, decided by Postgres (`fg_reserve`);
//! - `flash`: a flash-sale voucher, decided by the Redis gate, winners merged into Postgres
//!   (mode A), losers answered by the sold-out short cut once the gate said OUT_OF_STOCK;
//! - `naive`: the article's check-then-act (read the use count, insert, write back `used + 1`),
//!   which over-allocates under concurrency; it is here to show that it does. It is not the
//!   service's code and does not go through it: it has connections of its own to the bench's
//!   database, as many as the service gets (`--pool`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use clap::Parser;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use hdrhistogram::Histogram;
use loadtest::Scratch;
use shared::domain::{
    counter_slots_for, Discount, NewVoucher, OrderId, Reserve, VoucherCode, VoucherRules,
};
use shared::reservations::error::ReserveError;
use shared::App;
use tokio_postgres::types::Type;
use tokio_postgres::NoTls;

#[derive(Parser, Debug, Clone)]
#[command(about = "Reserve throughput and latency on one hot voucher, strategy against strategy")]
struct Args {
    /// Uses of each voucher, and requests in the sale phase.
    #[arg(long, default_value_t = 5_000)]
    limit: usize,
    /// Requests in the sold-out phase.
    #[arg(long, default_value_t = 50_000)]
    sold_out: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Postgres connections.
    #[arg(long, default_value_t = 16)]
    pool: usize,
    /// Strategies to run, in order: `standard`, `flash` or `naive`, each with an optional
    /// `:K`, the counter slots its voucher's limit is split into (the service's own choice
    /// from the limit when absent; naive always runs on one), and an optional `@plain`: each
    /// reserve written on its own (GROUP_COMMIT_MAX=1), as before group commit.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "standard:1@plain,standard,flash:1@plain,flash,naive"
    )]
    strategies: Vec<String>,
    /// Postgres server (a fresh database is created on it and dropped afterwards).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432")]
    postgres: String,
    /// Redis (keys go under a prefix of their own and are deleted afterwards).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
}

/// What one request did.
enum Answer {
    Granted,
    Refused,
    Error,
}

struct Phase {
    elapsed: Duration,
    hist: Histogram<u64>,
    granted: usize,
    refused: usize,
    errors: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let scratch = Scratch::new("bench", &args.postgres, &args.redis);
    let settings = scratch.settings(
        "",
        &[
            ("DATABASE_POOL_SIZE", args.pool.to_string()),
            ("DATABASE_TIMEOUT_MS", "30000".into()),
            ("REDIS_TIMEOUT_MS", "5000".into()),
        ],
    )?;
    let app = App::new(&settings)?;
    app.prepare_database().await?;
    let plain = App::new(&scratch.settings(
        "",
        &[
            ("DATABASE_POOL_SIZE", args.pool.to_string()),
            ("DATABASE_TIMEOUT_MS", "30000".into()),
            ("REDIS_TIMEOUT_MS", "5000".into()),
            ("GROUP_COMMIT_MAX", "1".into()),
        ],
    )?)?;
    let pg = own_pool(&scratch.database_url(), args.pool)?;

    println!(
        "one hot voucher with {} uses: a sale phase of {} requests and a sold-out phase of {}, \
         from distinct customers; concurrency {}, {} Postgres connections, {} cores, {} build\n",
        args.limit,
        args.limit,
        args.sold_out,
        args.concurrency,
        args.pool,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        // Debug figures are not comparable with the published ones: say which these are.
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    );
    println!("| strategy | phase | requests | req/s | p50 ms | p99 ms | max ms | granted | refused | errors |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut failures = Vec::new();
    for strategy in &args.strategies {
        let (strategy, app, how) = match strategy.strip_suffix("@plain") {
            Some(s) => (s.to_owned(), &plain, " one by one"),
            None => (strategy.clone(), &app, ""),
        };
        let (kind, slots) = match strategy.split_once(':') {
            Some((kind, k)) => (kind, k.parse::<i16>().context("counter slots")?),
            None if strategy == "naive" => ("naive", 1),
            None => (
                strategy.as_str(),
                counter_slots_for(args.limit as i64) as i16,
            ),
        };
        let plainly = if how.is_empty() { "" } else { "-PLAIN" };
        let code = VoucherCode::parse(&format!("BENCH-{}-K{slots}{plainly}", kind.to_uppercase()))?;
        app.reservations()
            .create_voucher(&NewVoucher {
                code: code.clone(),
                name: None,
                metadata: Default::default(),
                rules: VoucherRules {
                    discount: Discount::Fixed(100_000),
                    min_order_amount: 0,
                    total_limit: args.limit as i32,
                    per_user_limit: 1,
                    starts_at: Utc::now() - chrono::Duration::minutes(1),
                    ends_at: Utc::now() + chrono::Duration::hours(1),
                    active: true,
                    budget_amount: None,
                },
                flash_sale: kind == "flash",
                exclusive: false,
                reservation_ttl_seconds: 900,
                counter_slots: slots,
            })
            .await?;
        let phases = [
            ("sale", 0, args.limit),
            ("sold out", args.limit, args.limit + args.sold_out),
        ];
        for (name, from, to) in phases {
            let p = match kind {
                "standard" | "flash" => {
                    let app = app.clone();
                    run(&args, &code, from, to, move |code, i| {
                        via_app(app.clone(), code, i)
                    })
                    .await
                }
                "naive" => {
                    let pg = pg.clone();
                    run(&args, &code, from, to, move |code, i| {
                        naive(pg.clone(), code, i)
                    })
                    .await
                }
                other => anyhow::bail!("unknown strategy {other:?}"),
            };
            println!(
                "| {kind} K={slots}{how} | {name} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
                to - from,
                (to - from) as f64 / p.elapsed.as_secs_f64(),
                p.hist.value_at_quantile(0.5) as f64 / 1000.0,
                p.hist.value_at_quantile(0.99) as f64 / 1000.0,
                p.hist.max() as f64 / 1000.0,
                p.granted,
                p.refused,
                p.errors,
            );
        }
        let held: i64 = pg
            .get()
            .await?
            .query_one(
                "SELECT count(*) FROM redemption WHERE voucher_code = $1 AND status IN (1, 2)",
                &[&code.as_str()],
            )
            .await?
            .get(0);
        let verdict = if held == args.limit as i64 {
            format!("allocated exactly {held}")
        } else if held > args.limit as i64 {
            format!(
                "OVER-ALLOCATED: {held} uses held for {} ({} too many)",
                args.limit,
                held - args.limit as i64
            )
        } else {
            format!("under-allocated: {held} uses held for {}", args.limit)
        };
        println!("|  | {kind} K={slots}{how}: {verdict} | | | | | | | | |");
        if kind != "naive" && held != args.limit as i64 {
            failures.push(format!("{strategy}: {verdict}"));
        }
    }
    scratch.remove().await;
    if !failures.is_empty() {
        anyhow::bail!("allocation was not exact: {failures:?}");
    }
    Ok(())
}

/// Connections of the bench's own, outside the service: what the naive strategy runs on, and
/// what counts the uses each strategy ended up holding.
fn own_pool(url: &str, size: usize) -> anyhow::Result<Pool> {
    let config: tokio_postgres::Config = url.parse()?;
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Ok(Pool::builder(manager).max_size(size.max(1)).build()?)
}

async fn via_app(app: App, code: VoucherCode, i: usize) -> Answer {
    let req = Reserve {
        code,
        order_id: OrderId::parse(&format!("o-{i}")).unwrap(),
        customer_id: i as i64 + 1,
        order_amount: 500_000,
    };
    match app.reservations().reserve(&req).await {
        Ok(_) => Answer::Granted,
        Err(ReserveError::OutOfStock | ReserveError::AlreadyUsed) => Answer::Refused,
        Err(_) => Answer::Error,
    }
}

/// The article's naive version: check, then act, in separate statements.
async fn naive(pg: Pool, code: VoucherCode, i: usize) -> Answer {
    let result = async {
        let client = pg.get().await?;
        let row = client
            .query_typed(
                "SELECT s.used, v.total_limit, v.discount_amount
                   FROM voucher v JOIN voucher_slot s ON s.voucher_code = v.code AND s.slot = 0
                  WHERE v.code = $1",
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
                "UPDATE voucher_slot SET used = $2 WHERE voucher_code = $1 AND slot = 0",
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

async fn run<F, Fut>(args: &Args, code: &VoucherCode, from: usize, to: usize, op: F) -> Phase
where
    F: Fn(VoucherCode, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Answer> + Send,
{
    let next = Arc::new(AtomicUsize::new(from));
    let started = Instant::now();
    let workers: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (next, code, op) = (next.clone(), code.clone(), op.clone());
            tokio::spawn(async move {
                let mut hist = Histogram::<u64>::new(3).unwrap();
                let mut tally = [0usize; 3];
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= to {
                        break;
                    }
                    let t = Instant::now();
                    let slot = match op(code.clone(), i).await {
                        Answer::Granted => 0,
                        Answer::Refused => 1,
                        Answer::Error => 2,
                    };
                    tally[slot] += 1;
                    hist.record(t.elapsed().as_micros() as u64).unwrap();
                }
                (hist, tally)
            })
        })
        .collect();
    let mut hist = Histogram::<u64>::new(3).unwrap();
    let mut tally = [0usize; 3];
    for w in workers {
        let (h, t) = w.await.unwrap();
        hist.add(h).unwrap();
        for (sum, n) in tally.iter_mut().zip(t) {
            *sum += n;
        }
    }
    Phase {
        elapsed: started.elapsed(),
        hist,
        granted: tally[0],
        refused: tally[1],
        errors: tally[2],
    }
}
