//! `soak`: hundreds of flash sales back to back on one in-process Flashgate, to show that what
//! the service keeps and what it costs follow what is live, not what history holds.
//!
//! Each sale is a flash voucher with `--limit` uses and `--requests` reserves from distinct
//! customers, `--concurrency` at a time, through the service's own code (no HTTP: the figure is
//! the service's, not a client's). A winner confirms, releases, or leaves its reservation to
//! expire (one in four each way but confirm, two in four). The sale then ends (its window is
//! closed by a change) and one sweep runs: it expires what is due, and retires the ended sales
//! (`GATE_RETIRE_AFTER_SECONDS=0` here, a day by default). At the end, after the last TTL, one
//! more sweep.
//!
//! Reported: Redis memory and the run's key count before, during and after; the tables' sizes;
//! and for the first and the last tenth of the sales, the reserves' p99 and the sweeps' mean
//! duration. `cargo run --release --bin soak -- --help`; figures in docs/BENCHMARKS.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use clap::Parser;
use hdrhistogram::Histogram;
use loadtest::Scratch;
use shared::domain::{
    Discount, NewVoucher, OrderId, Reserve, VoucherCode, VoucherPatch, VoucherRules,
};
use shared::App;

#[derive(Parser, Debug, Clone)]
#[command(
    about = "Flash sales back to back: memory, key count, table sizes, sweep and p99 over time"
)]
struct Args {
    /// Sales, one after the other.
    #[arg(long, default_value_t = 300)]
    sales: usize,
    /// Uses of each sale's voucher.
    #[arg(long, default_value_t = 1_000)]
    limit: usize,
    /// Reserve requests of each sale, from distinct customers.
    #[arg(long, default_value_t = 5_000)]
    requests: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Postgres server, without a database: the run creates its own and drops it.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432")]
    postgres: String,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
}

/// One sale's figures.
struct Sale {
    latency: Histogram<u64>,
    granted: u64,
    sweep: Duration,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let scratch = Scratch::new("soak", &args.postgres, &args.redis);
    let settings = scratch.settings(
        "",
        &[
            ("DATABASE_POOL_SIZE", "16".into()),
            ("DATABASE_TIMEOUT_MS", "30000".into()),
            ("REDIS_TIMEOUT_MS", "5000".into()),
            ("GATE_RETIRE_AFTER_SECONDS", "0".into()),
        ],
    )?;
    let app = App::new(&settings)?;
    app.prepare_database().await?;
    let (pg, conn) =
        tokio_postgres::connect(&scratch.database_url(), tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    let result = soak(&args, &app, &pg, &scratch.key_prefix("")).await;
    drop(pg);
    scratch.remove().await;
    result
}

async fn soak(
    args: &Args,
    app: &App,
    pg: &tokio_postgres::Client,
    prefix: &str,
) -> anyhow::Result<()> {
    let mut redis = redis::Client::open(args.redis.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let memory_before = used_memory(&mut redis).await?;
    println!(
        "{} flash sales of {} uses, {} reserves each, concurrency {}, {} cores, {} build",
        args.sales,
        args.limit,
        args.requests,
        args.concurrency,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    );
    println!(
        "Redis before: {} bytes used, {} keys of the run",
        memory_before,
        keys(&mut redis, prefix).await?
    );
    println!("| sales done | Redis used bytes | keys of the run | redemption table | sweep ms | p99 ms |");
    println!("|---|---|---|---|---|---|");

    let mut sales = Vec::with_capacity(args.sales);
    for i in 0..args.sales {
        let sale = one_sale(args, app, i).await?;
        if (i + 1) % (args.sales / 10).max(1) == 0 {
            println!(
                "| {} | {} | {} | {} | {:.1} | {:.2} |",
                i + 1,
                used_memory(&mut redis).await?,
                keys(&mut redis, prefix).await?,
                table_size(pg, "redemption").await?,
                sale.sweep.as_secs_f64() * 1000.0,
                sale.latency.value_at_quantile(0.99) as f64 / 1000.0,
            );
        }
        // A release gives its use back to the sale: at least the limit is granted.
        if sale.granted < args.limit.min(args.requests) as u64 {
            anyhow::bail!("sale {i}: {} granted of {} uses", sale.granted, args.limit);
        }
        sales.push(sale);
    }
    // The last sale's expiries fall due after its TTL.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let report = app.sweeper().sweep().await?;
    let memory_after = used_memory(&mut redis).await?;
    let keys_after = keys(&mut redis, prefix).await?;

    let tenth = (args.sales / 10).max(1);
    let (first, last) = (&sales[..tenth], &sales[sales.len() - tenth..]);
    println!();
    println!("| | first tenth | last tenth | ratio |");
    println!("|---|---|---|---|");
    let (p_first, p_last) = (p99(first), p99(last));
    println!(
        "| reserve p99 ms | {p_first:.2} | {p_last:.2} | {:.2} |",
        p_last / p_first
    );
    let (s_first, s_last) = (sweep_ms(first), sweep_ms(last));
    println!(
        "| sweep mean ms | {s_first:.1} | {s_last:.1} | {:.2} |",
        s_last / s_first
    );
    println!();
    println!(
        "after the last sweep ({} expired, {} retired): Redis {} bytes used ({:+.1}% against before), {} keys of the run",
        report.expired,
        report.retired,
        memory_after,
        (memory_after as f64 - memory_before as f64) * 100.0 / memory_before as f64,
        keys_after,
    );
    for table in ["voucher", "voucher_slot", "voucher_customer", "redemption"] {
        let rows: i64 = pg
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await?
            .get(0);
        println!(
            "table {table}: {rows} rows, {} bytes",
            table_size(pg, table).await?
        );
    }
    if keys_after != 0 {
        anyhow::bail!("{keys_after} keys of retired sales are still in Redis");
    }
    Ok(())
}

/// One sale: the voucher, the reserves (each winner then confirms, releases or lets its
/// reservation expire), the end of its window, and one sweep.
async fn one_sale(args: &Args, app: &App, i: usize) -> anyhow::Result<Sale> {
    let code = VoucherCode::parse(&format!("SOAK{i:05}"))?;
    let reservations = app.reservations();
    reservations
        .create_voucher(&NewVoucher {
            code: code.clone(),
            name: None,
            metadata: Default::default(),
            rules: VoucherRules {
                discount: Discount::Fixed(1_000),
                min_order_amount: 0,
                total_limit: args.limit as i32,
                per_user_limit: 1,
                starts_at: Utc::now() - chrono::Duration::minutes(1),
                ends_at: Utc::now() + chrono::Duration::hours(1),
                active: true,
                budget_amount: None,
            },
            flash_sale: true,
            exclusive: false,
            reservation_ttl_seconds: 1,
            counter_slots: 1,
        })
        .await?;
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..args.concurrency {
        let (app, code, next, requests) = (app.clone(), code.clone(), next.clone(), args.requests);
        workers.push(tokio::spawn(async move {
            let mut latency = Histogram::<u64>::new(3).expect("histogram");
            let mut granted = 0u64;
            loop {
                let c = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if c >= requests {
                    return Ok::<_, anyhow::Error>((latency, granted));
                }
                let order = OrderId::parse(&format!("o{c}"))?;
                let request = Reserve {
                    code: code.clone(),
                    customer_id: c as i64 + 1,
                    order_id: order.clone(),
                    order_amount: 10_000,
                };
                let started = Instant::now();
                let answer = app.reservations().reserve(&request).await;
                latency.saturating_record(started.elapsed().as_micros() as u64);
                if answer.is_ok() {
                    granted += 1;
                    match c % 4 {
                        0 => app.reservations().release(&code, &order).await?,
                        1 => {}
                        _ => {
                            app.reservations().confirm(&code, &order).await?;
                        }
                    }
                }
            }
        }));
    }
    let mut latency = Histogram::<u64>::new(3)?;
    let mut granted = 0;
    for w in workers {
        let (h, g) = w.await??;
        latency.add(h)?;
        granted += g;
    }
    let patch = VoucherPatch {
        ends_at: Some(Utc::now()),
        ..VoucherPatch::default()
    };
    reservations.patch_voucher(&code, &patch).await?;
    let started = Instant::now();
    app.sweeper().sweep().await?;
    Ok(Sale {
        latency,
        granted,
        sweep: started.elapsed(),
    })
}

async fn used_memory(redis: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO").arg("memory").query_async(redis).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no used_memory in INFO"))
}

/// Keys under the run's prefix, counted with SCAN (never a blocking KEYS on a shared server).
async fn keys(
    redis: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
) -> anyhow::Result<usize> {
    let mut cursor = 0u64;
    let mut count = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(redis)
            .await?;
        count += batch.len();
        if next == 0 {
            return Ok(count);
        }
        cursor = next;
    }
}

/// A table's size with its indexes and TOAST.
async fn table_size(pg: &tokio_postgres::Client, table: &str) -> anyhow::Result<i64> {
    let row = pg
        .query_one(
            "SELECT pg_total_relation_size($1::text::regclass)",
            &[&table],
        )
        .await?;
    Ok(row.get(0))
}

fn p99(sales: &[Sale]) -> f64 {
    let mut all = Histogram::<u64>::new(3).expect("histogram");
    for s in sales {
        all.add(&s.latency).expect("same bounds");
    }
    all.value_at_quantile(0.99) as f64 / 1000.0
}

fn sweep_ms(sales: &[Sale]) -> f64 {
    sales
        .iter()
        .map(|s| s.sweep.as_secs_f64() * 1000.0)
        .sum::<f64>()
        / sales.len() as f64
}
