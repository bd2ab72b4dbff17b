//! `flash-sale`: a flash sale against a running Flashgate, checked to the last use.
//!
//! Open model: request k is due at `start + k / rate`, whatever happened to the ones before,
//! and its latency is measured from that due time, so a slow server cannot hide its tail
//! (no coordinated omission). Latencies go into HdrHistograms, per outcome.
//!
//! One run: create a voucher with N uses, offer `rate` reserve requests/s for `duration` from
//! `customers` customers, a share of them retries of earlier requests and a share reusing
//! another customer's orderId; then confirm a share of the winners and release another; then
//! check against the server: exactly N active after the burst, no customer above the per-user
//! limit, every retry answered byte for byte like its first. It prints a table, writes a JSON
//! summary and a self-contained HTML report (latency and allocation over time, as SVG).
//!
//! `--compare` starts its own servers, each a `flashgate serve` process of its own (mode A, and
//! mode B on each local SQS endpoint and Kafka broker given), and offers the same load to `GET /health/live` (the HTTP
//! ceiling), a standard voucher, a flash voucher in mode A, in each mode B, and a sold-out flash
//! voucher. For mode B it also reports the events still to land when the sale ends and how fast
//! the consumer drains them. With `--campaign-codes N` it adds a standard and a flash campaign
//! of N generated codes whose total is the voucher's uses (and a flash one in each mode B): the same plan, but every new order
//! takes a different code (a retry, or an orderId reused by another customer, keeps its
//! original's).
//!
//! The servers are processes, not tasks of this one: a server inside the generator's process
//! shares its runtime, so the generator's own queueing was reported as the server's latency
//! (a sold-out phase at 0.82 of the offered rate with a p50 of 186 ms, on a path wrk drives at
//! 78,000 req/s). Against `flashgate serve`, each phase measures what a run with `--base-url`
//! measures, the way a user runs it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use loadtest::{server_view, Scratch};
use plotters::prelude::*;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "flash-sale",
    about = "Run a flash sale against Flashgate and check the outcome"
)]
struct Args {
    /// Flashgate to test (ignored with --compare, which starts its own).
    #[arg(long, default_value = "http://127.0.0.1:3000")]
    base_url: String,
    /// With --compare: the `flashgate` executable to start (default: the one beside this one).
    #[arg(long)]
    server_bin: Option<String>,
    /// Uses of the voucher.
    #[arg(long, default_value_t = 1000)]
    uses: i64,
    /// Offered reserve requests per second.
    #[arg(long, default_value_t = 2000)]
    rate: u64,
    /// Seconds of offered load.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Distinct customers.
    #[arg(long, default_value_t = 20_000)]
    customers: i64,
    /// Uses one customer may hold.
    #[arg(long, default_value_t = 1)]
    per_user_limit: i64,
    /// Share of requests that re-send an earlier request unchanged (a client retry).
    #[arg(long, default_value_t = 0.1)]
    retry_share: f64,
    /// Share of requests that reuse an earlier orderId for another customer.
    #[arg(long, default_value_t = 0.02)]
    conflict_share: f64,
    /// Share of winners confirmed after the burst.
    #[arg(long, default_value_t = 0.6)]
    confirm_share: f64,
    /// Share of winners released after the burst.
    #[arg(long, default_value_t = 0.2)]
    release_share: f64,
    /// A standard (Postgres-decided) voucher instead of a flash-sale one.
    #[arg(long)]
    standard: bool,
    /// Requests in flight at most (beyond it, due requests wait, and their wait counts).
    #[arg(long, default_value_t = 4096)]
    max_in_flight: usize,
    /// Seed of the request plan: with the same seed and knobs, a run offers the same requests.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Where the JSON summary and the HTML report go.
    #[arg(long, default_value = "target/flash-sale")]
    out: String,
    /// Compare the HTTP ceiling, standard, flash mode A, mode B and sold out, in one run.
    #[arg(long)]
    compare: bool,
    /// With --compare: a local SQS endpoint (e.g. http://127.0.0.1:9324) to include mode B on
    /// it; may be given more than once.
    #[arg(long)]
    sqs_endpoint: Vec<String>,
    /// With --compare: Kafka bootstrap servers (e.g. 127.0.0.1:9092) to include mode B on Kafka.
    #[arg(long)]
    kafka_brokers: Option<String>,
    /// With --compare: Postgres server for the servers it starts (a fresh database is used).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432")]
    postgres: String,
    /// With --compare: Redis for the servers it starts.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// With --compare: add a standard and a flash campaign of this many generated codes, total
    /// `--uses`, every new order on a different code (and a flash one in each mode B).
    #[arg(long)]
    campaign_codes: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    New,
    Retry,
    Conflict,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Planned {
    kind: Kind,
    customer: i64,
    order: String,
    /// Which code of a campaign: each new order the next one (a single voucher ignores it).
    code: usize,
}

#[derive(Debug, Clone)]
struct Answer {
    due: Duration,
    done: Duration,
    status: u16,
    body: String,
}

impl Answer {
    fn latency_us(&self) -> u64 {
        self.done.saturating_sub(self.due).as_micros() as u64
    }
    fn outcome(&self) -> String {
        match self.status {
            0 => "TRANSPORT_ERROR".into(),
            201 => "RESERVED".into(),
            200 if self.body.contains("\"status\":\"ok\"") => "LIVE".into(),
            _ => serde_json::from_str::<Value>(&self.body)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("HTTP_{}", self.status)),
        }
    }
}

/// The requests of one phase, in the order they are offered. Seeded, so that a run can be repeated:
/// `StdRng` may change its stream in a new `rand` release, but Cargo.lock pins the release.
fn plan(args: &Args, total: usize, seed: u64) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out: Vec<Planned> = Vec::with_capacity(total);
    let mut news: Vec<usize> = Vec::new();
    for k in 0..total {
        let roll: f64 = rng.random();
        let p = if !news.is_empty() && roll < args.retry_share {
            let j = news[rng.random_range(0..news.len())];
            Planned {
                kind: Kind::Retry,
                ..out[j].clone()
            }
        } else if !news.is_empty() && roll < args.retry_share + args.conflict_share {
            let j = news[rng.random_range(0..news.len())];
            Planned {
                kind: Kind::Conflict,
                customer: out[j].customer % args.customers + 1,
                order: out[j].order.clone(),
                code: out[j].code,
            }
        } else {
            news.push(k);
            Planned {
                kind: Kind::New,
                customer: rng.random_range(1..=args.customers.max(1)),
                order: format!("o-{k}"),
                code: news.len() - 1,
            }
        };
        out.push(p);
    }
    out
}

/// Offers `requests` at `rate`/s (open model) and returns each answer in request order.
async fn offer(
    http: &reqwest::Client,
    requests: Vec<(reqwest::Method, String, Option<String>)>,
    rate: u64,
    max_in_flight: usize,
    label: &str,
) -> Vec<Answer> {
    let total = requests.len();
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} {per_sec}")
            .unwrap()
            .progress_chars("=> "),
    );
    bar.set_message(label.to_owned());
    let gate = Arc::new(Semaphore::new(max_in_flight));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(total);
    for (k, (method, url, body)) in requests.into_iter().enumerate() {
        let due = Duration::from_secs_f64(k as f64 / rate as f64);
        tokio::time::sleep_until(tokio::time::Instant::from_std(start + due)).await;
        let permit = gate.clone().acquire_owned().await.unwrap();
        let (http, bar) = (http.clone(), bar.clone());
        tasks.push(tokio::spawn(async move {
            let mut req = http.request(method, url);
            if let Some(b) = body {
                req = req.header("content-type", "application/json").body(b);
            }
            let (status, body) = match req.send().await {
                Ok(r) => {
                    let s = r.status().as_u16();
                    (s, r.text().await.unwrap_or_default())
                }
                Err(e) => (0, e.to_string()),
            };
            drop(permit);
            bar.inc(1);
            Answer {
                due,
                done: start.elapsed(),
                status,
                body,
            }
        }));
    }
    let mut answers = Vec::with_capacity(total);
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    bar.finish_and_clear();
    answers
}

/// Uses granted: distinct 201 answers (a retry of a granted order gets the same bytes).
fn granted(answers: &[Answer]) -> i64 {
    answers
        .iter()
        .filter(|a| a.status == 201)
        .map(|a| &a.body)
        .collect::<std::collections::HashSet<_>>()
        .len() as i64
}

fn histogram(answers: &[&Answer]) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).unwrap();
    for a in answers {
        h.record(a.latency_us().max(1)).unwrap();
    }
    h
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

struct PhaseSummary {
    name: String,
    offered: f64,
    achieved: f64,
    p50: f64,
    p99: f64,
    /// p99 of the 201s alone.
    winners_p99: Option<f64>,
    outcomes: Vec<(String, usize)>,
    /// Mode B: events not yet in Postgres when the last answer came, and the rate the consumer
    /// landed them at (from the sale's start to the last one landed).
    drain: Option<(i64, f64)>,
    /// Uses the server holds after the phase (its voucher's or campaign's `usedCount`).
    held: Option<i64>,
}

fn summarize(name: &str, answers: &[Answer], offered: f64) -> PhaseSummary {
    let last = answers.iter().map(|a| a.done).max().unwrap_or_default();
    let all: Vec<&Answer> = answers.iter().collect();
    let h = histogram(&all);
    let winners: Vec<&Answer> = answers.iter().filter(|a| a.status == 201).collect();
    let winners_p99 =
        (!winners.is_empty()).then(|| ms(histogram(&winners).value_at_quantile(0.99)));
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    for a in answers {
        *outcomes.entry(a.outcome()).or_default() += 1;
    }
    let mut outcomes: Vec<_> = outcomes.into_iter().collect();
    outcomes.sort();
    PhaseSummary {
        name: name.to_owned(),
        offered,
        achieved: answers.len() as f64 / last.as_secs_f64().max(1e-9),
        p50: ms(h.value_at_quantile(0.5)),
        p99: ms(h.value_at_quantile(0.99)),
        winners_p99,
        outcomes,
        drain: None,
        held: None,
    }
}

async fn create_voucher(
    http: &reqwest::Client,
    base: &str,
    code: &str,
    args: &Args,
    flash: bool,
) -> anyhow::Result<()> {
    let mut body = sale_rules(args);
    body["code"] = json!(code);
    body["flashSale"] = json!(flash);
    created(http, &format!("{base}/vouchers"), &body).await?;
    Ok(())
}

/// The rules of the sale's voucher or campaign: its discount, `--uses` in all, the per-user
/// limit, open from a minute ago for two hours.
fn sale_rules(args: &Args) -> Value {
    let now = chrono::Utc::now();
    json!({
        "discountAmount": 100_000,
        "totalLimit": args.uses,
        "perUserLimit": args.per_user_limit,
        "startsAt": (now - chrono::Duration::minutes(1)).to_rfc3339(),
        "endsAt": (now + chrono::Duration::hours(2)).to_rfc3339(),
    })
}

/// POSTs `body` to `url`, expecting 201, and returns the created view.
async fn created(http: &reqwest::Client, url: &str, body: &Value) -> anyhow::Result<Value> {
    let resp = http.post(url).json(body).send().await?;
    if resp.status().as_u16() != 201 {
        bail!("POST {url}: {} {}", resp.status(), resp.text().await?);
    }
    Ok(resp.json().await?)
}

async fn voucher(http: &reqwest::Client, base: &str, code: &str) -> anyhow::Result<Value> {
    Ok(http
        .get(format!("{base}/vouchers/{code}"))
        .send()
        .await?
        .json()
        .await?)
}

/// Waits until the server's `usedCount` holds still (mode B lands events after the answers).
async fn settled_view(
    http: &reqwest::Client,
    base: &str,
    code: &str,
    expect: i64,
) -> anyhow::Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut view = voucher(http, base, code).await?;
    while view["usedCount"].as_i64() != Some(expect) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        view = voucher(http, base, code).await?;
    }
    Ok(view)
}

/// Creates a campaign (standard, or `flash`-sale) of `count` generated codes whose total is
/// `args.uses`, and reads its codes back (the CSV download): its id and codes.
async fn create_campaign(
    http: &reqwest::Client,
    base: &str,
    args: &Args,
    count: i64,
    flash: bool,
) -> anyhow::Result<(i64, Vec<String>)> {
    let mut body = sale_rules(args);
    body["codes"] = json!({ "count": count });
    body["flashSale"] = json!(flash);
    let view = created(http, &format!("{base}/campaigns"), &body).await?;
    let id = view["id"].as_i64().context("campaign id")?;
    let csv = http
        .get(format!("{base}/campaigns/{id}/codes"))
        .header("accept", "text/csv")
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let codes: Vec<String> = csv
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').next().map(str::to_owned))
        .collect();
    if codes.len() as i64 != count {
        bail!(
            "campaign {id}: {} codes listed, {count} generated",
            codes.len()
        );
    }
    Ok((id, codes))
}

/// Reserve requests of the plan: on `codes[0]` for a voucher, on each order's own code of a
/// campaign.
fn reserve_requests(
    base: &str,
    codes: &[String],
    planned: &[Planned],
) -> Vec<(reqwest::Method, String, Option<String>)> {
    planned
        .iter()
        .map(|p| {
            let code = &codes[p.code % codes.len()];
            (
                reqwest::Method::POST,
                format!("{base}/vouchers/{code}/reservations"),
                Some(
                    json!({"customerId": p.customer, "orderId": p.order, "orderAmount": 500_000})
                        .to_string(),
                ),
            )
        })
        .collect()
}

/// One complete sale against `base`: burst, checks, confirm/release, report.
async fn sale(args: &Args, http: &reqwest::Client, base: &str) -> anyhow::Result<()> {
    let code = format!("SALE-{}", std::process::id() % 100_000);
    let flash = !args.standard;
    create_voucher(http, base, &code, args, flash).await?;
    let total = (args.rate * args.duration) as usize;
    let planned = plan(args, total, args.seed);
    println!(
        "flash sale on {base}: voucher {code} ({}), {} uses, {} req/s offered for {} s from {} customers \
         ({:.0}% retries, {:.0}% reused orderIds)",
        if flash { "flash-sale" } else { "standard" },
        args.uses,
        args.rate,
        args.duration,
        args.customers,
        args.retry_share * 100.0,
        args.conflict_share * 100.0
    );
    let count = |k: Kind| planned.iter().filter(|p| p.kind == k).count();
    println!(
        "{} requests: {} new orders, {} retries, {} reusing another customer's orderId",
        planned.len(),
        count(Kind::New),
        count(Kind::Retry),
        count(Kind::Conflict)
    );
    let metrics_before = server_view::scrape(http, base).await;
    let answers = offer(
        http,
        reserve_requests(base, std::slice::from_ref(&code), &planned),
        args.rate,
        args.max_in_flight,
        "reserve",
    )
    .await;
    // The server's view of the same burst: what its /metrics moved by (another client's
    // reserves at the same time would be counted too).
    let server = match (metrics_before, server_view::scrape(http, base).await) {
        (Some(before), Some(after)) => Some(after.since(&before)),
        _ => None,
    };

    // --- checks ------------------------------------------------------------------------
    let mut problems = Vec::new();
    let mut by_order: HashMap<&str, Vec<(usize, &Planned, &Answer)>> = HashMap::new();
    for (i, (p, a)) in planned.iter().zip(&answers).enumerate() {
        by_order
            .entry(p.order.as_str())
            .or_default()
            .push((i, p, a));
    }
    let mut winners: Vec<(String, i64, Duration)> = Vec::new();
    let mut per_customer: HashMap<i64, i64> = HashMap::new();
    let mut retries_checked = 0;
    for (order, sends) in &by_order {
        let won: Vec<_> = sends.iter().filter(|(_, _, a)| a.status == 201).collect();
        if let Some((_, p, a)) = won.first() {
            if won
                .iter()
                .any(|(_, q, b)| q.customer != p.customer || b.body != a.body)
            {
                problems.push(format!("{order}: different 201 answers"));
            }
            winners.push((
                order.to_string(),
                p.customer,
                won.iter().map(|(_, _, a)| a.done).min().unwrap(),
            ));
            *per_customer.entry(p.customer).or_default() += 1;
        }
        // A customer who was granted this order got that same 201 on every send of it.
        let mut granted: HashMap<i64, &Answer> = HashMap::new();
        for (_, p, a) in sends {
            if a.status == 201 {
                granted.entry(p.customer).or_insert(a);
            }
        }
        for (_, p, a) in sends {
            if let Some(g) = granted.get(&p.customer) {
                retries_checked += 1;
                if (g.status, &g.body) != (a.status, &a.body) {
                    problems.push(format!(
                        "{order}: customer {} got {} and {}",
                        p.customer, g.body, a.body
                    ));
                }
            }
        }
    }
    let over: Vec<_> = per_customer
        .iter()
        .filter(|(_, n)| **n > args.per_user_limit)
        .collect();
    if !over.is_empty() {
        problems.push(format!("{} customers above the per-user limit", over.len()));
    }
    let demand_met = winners.len() as i64 == args.uses;
    let view = settled_view(http, base, &code, winners.len() as i64).await?;
    let used = view["usedCount"].as_i64().unwrap_or(-1);
    if used != winners.len() as i64 {
        problems.push(format!(
            "server holds {used} uses, clients were granted {}",
            winners.len()
        ));
    }
    if used > args.uses {
        problems.push(format!("OVER-ALLOCATED: {used} > {}", args.uses));
    }

    // --- confirm a share, release another ------------------------------------------------
    winners.sort_by_key(|w| w.2);
    let n_confirm = (winners.len() as f64 * args.confirm_share) as usize;
    let n_release = (winners.len() as f64 * args.release_share) as usize;
    let mut follow = Vec::new();
    for (i, (order, _, _)) in winners.iter().enumerate() {
        if i < n_confirm {
            follow.push((
                reqwest::Method::POST,
                format!("{base}/vouchers/{code}/reservations/{order}/confirm"),
                None,
            ));
        } else if i < n_confirm + n_release {
            follow.push((
                reqwest::Method::DELETE,
                format!("{base}/vouchers/{code}/reservations/{order}"),
                None,
            ));
        }
    }
    let rate = args.rate.clamp(1, 2000);
    let after = offer(http, follow, rate, args.max_in_flight, "confirm/release").await;
    let failed = after
        .iter()
        .filter(|a| a.status != 200 && a.status != 204)
        .count();
    if failed > 0 {
        problems.push(format!("{failed} confirms/releases failed"));
    }
    let expect_used = winners.len() as i64 - n_release as i64;
    let final_view = settled_view(http, base, &code, expect_used).await?;
    if final_view["usedCount"].as_i64() != Some(expect_used)
        || final_view["confirmedCount"].as_i64() != Some(n_confirm as i64)
    {
        problems.push(format!(
            "after confirm/release: usedCount {} confirmedCount {}, expected {expect_used} and {n_confirm}",
            final_view["usedCount"], final_view["confirmedCount"]
        ));
    }

    // --- report --------------------------------------------------------------------------
    let summary = summarize("reserve", &answers, args.rate as f64);
    println!(
        "\noffered {:.0} req/s, achieved {:.0} req/s over {} requests",
        summary.offered,
        summary.achieved,
        answers.len()
    );
    println!("\n| outcome | count | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms |");
    println!("|---|---|---|---|---|---|---|");
    let mut outcome_rows = Vec::new();
    for (outcome, count) in &summary.outcomes {
        let these: Vec<&Answer> = answers.iter().filter(|a| &a.outcome() == outcome).collect();
        let h = histogram(&these);
        let row = json!({
            "outcome": outcome, "count": count,
            "p50": ms(h.value_at_quantile(0.5)), "p90": ms(h.value_at_quantile(0.9)),
            "p99": ms(h.value_at_quantile(0.99)), "p999": ms(h.value_at_quantile(0.999)), "max": ms(h.max()),
        });
        println!(
            "| {outcome} | {count} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            row["p50"].as_f64().unwrap(),
            row["p90"].as_f64().unwrap(),
            row["p99"].as_f64().unwrap(),
            row["p999"].as_f64().unwrap(),
            row["max"].as_f64().unwrap()
        );
        outcome_rows.push(row);
    }
    let all: Vec<&Answer> = answers.iter().collect();
    let h = histogram(&all);
    println!(
        "| all | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
        answers.len(),
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.9)),
        ms(h.value_at_quantile(0.99)),
        ms(h.value_at_quantile(0.999)),
        ms(h.max())
    );
    println!(
        "\n{} winners, {} confirmed, {} released; {} answers to granted orders compared with their 201",
        winners.len(),
        n_confirm,
        n_release,
        retries_checked
    );

    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out))?;
    let json_path = format!("{}/flash-sale.json", args.out);
    let summary_json = json!({
        "base": base, "code": code, "flashSale": flash, "uses": args.uses,
        "offeredRate": args.rate, "achievedRate": summary.achieved, "durationSeconds": args.duration,
        "requests": answers.len(), "outcomes": outcome_rows, "winners": winners.len(),
        "confirmed": n_confirm, "released": n_release, "retriesChecked": retries_checked,
        "serverAfterBurst": view, "serverAfterFollowUp": final_view, "problems": problems,
    });
    std::fs::write(&json_path, serde_json::to_string_pretty(&summary_json)?)?;
    let html_path = format!("{}/flash-sale.html", args.out);
    std::fs::write(
        &html_path,
        report_html(
            &code,
            args,
            &answers,
            &winners,
            server.as_ref(),
            &summary_json,
        )?,
    )?;
    println!("wrote {json_path} and {html_path}");

    // The verdict first: a run with problems still says how fast it was and what it held.
    println!(
        "{}",
        verdict(summary.p99, summary.winners_p99, used, args.uses)
    );
    if !problems.is_empty() {
        for p in problems.iter().take(20) {
            eprintln!("PROBLEM: {p}");
        }
        bail!("{} problems", problems.len());
    }
    if demand_met {
        println!("allocated exactly {}", args.uses);
    } else {
        println!(
            "allocated {} of {} (demand was lower than the stock)",
            winners.len(),
            args.uses
        );
    }
    Ok(())
}

/// The seed's promise, checked: a reserve answered within 100 ms at p99 (every answer, and the
/// winners' alone), and never a use past the voucher's total.
fn verdict(p99: f64, winners_p99: Option<f64>, held: i64, uses: i64) -> String {
    const TARGET_MS: f64 = 100.0;
    let mark = |ok: bool| if ok { "met" } else { "MISSED" };
    let winners = winners_p99.unwrap_or(0.0);
    format!(
        "the seed's verdict: p99 {p99:.1} ms, winners' p99 {winners:.1} ms, against {TARGET_MS:.0} ms: {}; \
         {held} uses held of {uses}: {}",
        mark(p99 < TARGET_MS && winners < TARGET_MS),
        if held == uses {
            "exactly all, none over".to_owned()
        } else if held < uses {
            format!("none over ({} left)", uses - held)
        } else {
            "OVER-ALLOCATED".to_owned()
        }
    )
}

/// A self-contained HTML page with two charts as inline SVG: latency over time (p50 and p99 per
/// 250 ms, by due time) and uses allocated over time.
fn report_html(
    code: &str,
    args: &Args,
    answers: &[Answer],
    winners: &[(String, i64, Duration)],
    server: Option<&server_view::Scrape>,
    summary: &Value,
) -> anyhow::Result<String> {
    let span = answers
        .iter()
        .map(|a| a.done)
        .max()
        .unwrap_or_default()
        .as_secs_f64()
        .max(0.001);
    let bucket = 0.25;
    let n = (span / bucket).ceil() as usize + 1;
    let mut buckets: Vec<Vec<u64>> = vec![Vec::new(); n];
    for a in answers {
        buckets[(a.due.as_secs_f64() / bucket) as usize].push(a.latency_us());
    }
    let pct = |v: &mut Vec<u64>, q: f64| -> Option<f64> {
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        Some(ms(v[((v.len() - 1) as f64 * q) as usize]))
    };
    let mut p50 = Vec::new();
    let mut p99 = Vec::new();
    for (i, b) in buckets.iter_mut().enumerate() {
        let t = i as f64 * bucket;
        if let (Some(a), Some(b)) = (pct(b, 0.5), pct(b, 0.99)) {
            p50.push((t, a));
            p99.push((t, b));
        }
    }
    let max_ms = p99.iter().map(|p| p.1).fold(1.0, f64::max);
    let latency = chart_svg(
        "ms",
        span,
        max_ms,
        &[
            Line::solid("p50", RGBColor(0x1f, 0x6f, 0xd1), p50),
            Line::solid("p99", RGBColor(0xd1, 0x32, 0x1f), p99),
        ],
    )?;

    let mut alloc = vec![(0.0, 0.0)];
    let mut times: Vec<f64> = winners.iter().map(|w| w.2.as_secs_f64()).collect();
    times.sort_by(f64::total_cmp);
    for (i, t) in times.iter().enumerate() {
        alloc.push((*t, (i + 1) as f64));
    }
    alloc.push((span, times.len() as f64));
    let limit = args.uses as f64;
    let allocation = chart_svg(
        "uses",
        span,
        limit.max(times.len() as f64).max(1.0),
        &[
            Line::solid("allocated", RGBColor(0x2a, 0x9d, 0x3a), alloc),
            Line {
                label: "limit",
                color: RGBColor(0x88, 0x88, 0x88),
                points: vec![(0.0, limit), (span, limit)],
                dashed: true,
            },
        ],
    )?;

    Ok(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Flashgate flash sale {code}</title>\
         <style>body{{font-family:sans-serif;margin:2em;color:#222}}pre{{background:#f4f4f4;padding:1em}}</style></head><body>\
         <h1>Flash sale on {code}</h1>\
         <p>{uses} uses, {rate} req/s offered for {dur} s; latency measured from each request's due time (open model).</p>\
         <h2>Latency over time (ms, p50 blue, p99 red, per 250 ms of due time)</h2>\
         {latency}\
         <h2>Uses allocated over time</h2>\
         {allocation}\
         <h2>The client's view and the server's</h2>{views}\
         <h2>Summary</h2><pre>{json}</pre></body></html>",
        views = views_html(answers, server),
        uses = args.uses,
        rate = args.rate,
        dur = args.duration,
        json = serde_json::to_string_pretty(summary).unwrap_or_default().replace('<', "&lt;"),
    ))
}

/// The outcome counts and latency as the client saw them, beside the server's own (its
/// `/metrics` over the burst): the two should agree on every count, and the server's latency
/// should be the client's less the network and the client's own queueing.
fn views_html(answers: &[Answer], server: Option<&server_view::Scrape>) -> String {
    let mut client: BTreeMap<String, f64> = BTreeMap::new();
    for a in answers {
        *client.entry(a.outcome()).or_default() += 1.0;
    }
    let Some(server) = server else {
        return format!(
            "<p>The server exports no <code>/metrics</code> (run it with <code>flashgate serve</code>): \
             only the client's counts.</p><pre>{client:#?}</pre>"
        );
    };
    let mut rows = String::new();
    let outcomes: std::collections::BTreeSet<&String> =
        client.keys().chain(server.outcomes.keys()).collect();
    for outcome in outcomes {
        let c = client.get(outcome).copied().unwrap_or(0.0);
        let s = server.outcomes.get(outcome).copied().unwrap_or(0.0);
        let mark = if c == s { "" } else { " style=\"color:#b00\"" };
        rows.push_str(&format!(
            "<tr{mark}><td>{outcome}</td><td>{c}</td><td>{s}</td></tr>"
        ));
    }
    let h = histogram(&answers.iter().collect::<Vec<_>>());
    let bound = |q: f64| match server.quantile_bound(q) {
        Some(le) if le.is_finite() => format!("&le; {} ms", le * 1000.0),
        Some(_) => "above the largest bucket".to_owned(),
        None => "-".to_owned(),
    };
    let mut buckets = String::new();
    let mut below = 0.0;
    for (le, n) in &server.buckets {
        let label = if le.is_finite() {
            format!("&le; {} ms", le * 1000.0)
        } else {
            "more".to_owned()
        };
        buckets.push_str(&format!("<tr><td>{label}</td><td>{}</td></tr>", n - below));
        below = *n;
    }
    format!(
        "<table border=1 cellpadding=4 style=\"border-collapse:collapse\">\
         <tr><th>outcome</th><th>client</th><th>server (/metrics)</th></tr>{rows}</table>\
         <p>p50: client {c50:.2} ms, server {s50}; p99: client {c99:.2} ms, server {s99} \
         (the server's latency from its histogram's buckets, the client's from each answer).</p>\
         <h3>The server's reserve latency histogram over the burst</h3>\
         <table border=1 cellpadding=4 style=\"border-collapse:collapse\">\
         <tr><th>bucket</th><th>answers</th></tr>{buckets}</table>",
        c50 = ms(h.value_at_quantile(0.5)),
        c99 = ms(h.value_at_quantile(0.99)),
        s50 = bound(0.5),
        s99 = bound(0.99),
    )
}

/// One series of a report chart.
struct Line {
    label: &'static str,
    color: RGBColor,
    points: Vec<(f64, f64)>,
    dashed: bool,
}

impl Line {
    fn solid(label: &'static str, color: RGBColor, points: Vec<(f64, f64)>) -> Line {
        Line {
            label,
            color,
            points,
            dashed: false,
        }
    }
}

/// One report chart as an SVG document: seconds since the first request on x, `unit` on y from 0
/// to a little above `ymax`, a legend naming the lines. Text stays `<text>` elements for the
/// browser to set, so no font is read here.
fn chart_svg(unit: &str, span: f64, ymax: f64, lines: &[Line]) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (860, 280)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..span, 0f64..ymax * 1.05)?;
        // Whole units once the axis is long enough, so the labels do not repeat a rounded value.
        let decimals = if ymax >= 20.0 { 0 } else { 1 };
        let y_label = |v: &f64| format!("{v:.decimals$}");
        let x_label = |v: &f64| format!("{v:.1}");
        chart
            .configure_mesh()
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .bold_line_style(RGBColor(0xdd, 0xdd, 0xdd))
            .x_desc("seconds since the first request was due")
            .y_desc(unit)
            .x_label_formatter(&x_label)
            .y_label_formatter(&y_label)
            .draw()?;
        for line in lines {
            let style = line.color.stroke_width(2);
            let points = line.points.iter().copied();
            let series = if line.dashed {
                chart.draw_series(DashedLineSeries::new(points, 6, 4, style))?
            } else {
                chart.draw_series(LineSeries::new(points, style))?
            };
            series
                .label(line.label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(0xbb, 0xbb, 0xbb))
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// One of `--compare`'s servers: a tag (its Redis key prefix), a label, its settings.
type Mode = (String, String, Vec<(&'static str, String)>);

/// `--compare`: the same offered load against each path, each server a process of its own.
async fn compare(args: &Args, http: &reqwest::Client) -> anyhow::Result<()> {
    let scratch = Scratch::new("flashsale", &args.postgres, &args.redis);
    let total = (args.rate * args.duration) as usize;
    // Mode A, then each mode B asked for.
    let mut servers: Vec<Mode> = vec![("A".into(), "mode A".into(), Vec::new())];
    for (i, endpoint) in args.sqs_endpoint.iter().enumerate() {
        // The emulator's own URL for the queue: they differ in form.
        let url = shared::events::sqs::Sqs::new(
            "",
            Some(endpoint.clone()),
            "us-east-1".into(),
            Duration::from_secs(10),
        )
        .client()
        .await
        .create_queue()
        .queue_name(format!("{}-{i}", scratch.name()))
        .send()
        .await?
        .queue_url()
        .unwrap_or_default()
        .to_owned();
        servers.push((
            format!("B{i}"),
            format!("mode B, SQS at {}", endpoint.trim_start_matches("http://")),
            vec![
                ("EVENTS_QUEUE_URL", url),
                ("SQS_ENDPOINT_URL", endpoint.clone()),
                ("AWS_REGION", "us-east-1".into()),
                ("EVENTS_TIMEOUT_MS", "10000".into()),
            ],
        ));
    }
    if let Some(brokers) = &args.kafka_brokers {
        servers.push((
            "K".into(),
            "mode B, Kafka".into(),
            vec![
                ("KAFKA_BROKERS", brokers.clone()),
                ("KAFKA_TOPIC", scratch.name().to_owned()),
                ("KAFKA_DLQ_TOPIC", format!("{}-dlq", scratch.name())),
                ("KAFKA_GROUP", scratch.name().to_owned()),
                // The producer's own batching, as on MSK. (The local broker misreports the end
                // offset of a multi-record batch, which only the warm-up reads, and the sale's
                // voucher is warmed before any event exists.)
                ("KAFKA_SESSION_TIMEOUT_MS", "2000".into()),
                ("EVENTS_TIMEOUT_MS", "10000".into()),
            ],
        ));
    }
    let bin = server_bin(args)?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out))?;
    let mut bases = HashMap::new();
    let mut processes = Vec::new();
    // One at a time: the first prepares the scratch database, the others find it ready.
    for (tag, _, extra) in &servers {
        let mut env = vec![
            ("DATABASE_POOL_SIZE", "8".to_owned()),
            ("SWEEP_INTERVAL_SECONDS", "0".to_owned()),
        ];
        env.extend(extra.iter().cloned());
        let (process, base) = ServerProcess::start(
            &bin,
            &scratch.env(tag, &env),
            &format!("{}/server-{tag}.log", args.out),
            http,
        )
        .await?;
        processes.push(process);
        bases.insert(tag.clone(), base);
    }
    let a = bases["A"].clone();
    println!(
        "compare: {} req/s offered for {} s per phase ({} requests), {} uses per voucher, \
         `{} serve` processes, {} cores",
        args.rate,
        args.duration,
        total,
        args.uses,
        bin.display(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut phases = Vec::new();
    let live: Vec<_> = (0..total)
        .map(|_| (reqwest::Method::GET, format!("{a}/health/live"), None))
        .collect();
    phases.push(summarize(
        "ceiling: GET /health/live",
        &offer(http, live, args.rate, args.max_in_flight, "ceiling").await,
        args.rate as f64,
    ));

    let planned = plan(args, total, args.seed);
    let mut runs: Vec<(String, String, bool)> = vec![
        ("standard".into(), a.clone(), false),
        ("flash, mode A".into(), a.clone(), true),
    ];
    for (tag, label, _) in servers.iter().skip(1) {
        runs.push((format!("flash, {label}"), bases[tag].clone(), true));
    }
    let mut sold_out_code = None;
    for (i, (name, base, flash)) in runs.iter().enumerate() {
        let code = format!("CMP{i}");
        create_voucher(http, base, &code, args, *flash).await?;
        let started = Instant::now();
        let answers = offer(
            http,
            reserve_requests(base, std::slice::from_ref(&code), &planned),
            args.rate,
            args.max_in_flight,
            name,
        )
        .await;
        let granted = granted(&answers);
        let used_at_end = voucher(http, base, &code).await?["usedCount"]
            .as_i64()
            .unwrap_or(0);
        let view = settled_view(http, base, &code, granted).await?;
        let drained = started.elapsed().as_secs_f64();
        println!(
            "{name}: {granted} granted, server usedCount {} ({} still to land when the sale ended)",
            view["usedCount"],
            granted - used_at_end
        );
        if view["usedCount"].as_i64().unwrap_or(0) > args.uses {
            bail!("{name} over-allocated");
        }
        if name == "flash, mode A" {
            sold_out_code = Some(code.clone());
        }
        let mut summary = summarize(name, &answers, args.rate as f64);
        if name.contains("mode B") {
            summary.drain = Some((granted - used_at_end, granted as f64 / drained));
        }
        summary.held = view["usedCount"].as_i64();
        phases.push(summary);
    }
    // A standard and a flash campaign on the mode A server, and a flash one on each mode B.
    let mut campaign_runs: Vec<(String, String, bool)> = vec![
        ("standard campaign".into(), a.clone(), false),
        ("flash campaign".into(), a.clone(), true),
    ];
    for (tag, label, _) in servers.iter().skip(1) {
        campaign_runs.push((format!("flash campaign, {label}"), bases[tag].clone(), true));
    }
    for (kind, base, flash) in &campaign_runs {
        let Some(count) = args.campaign_codes else {
            break;
        };
        let name = format!("{kind}, {count} codes");
        let (id, codes) = create_campaign(http, base, args, count, *flash).await?;
        let answers = offer(
            http,
            reserve_requests(base, &codes, &planned),
            args.rate,
            args.max_in_flight,
            "campaign",
        )
        .await;
        let granted = granted(&answers);
        let view: Value = http
            .get(format!("{base}/campaigns/{id}"))
            .send()
            .await?
            .json()
            .await?;
        let used = view["usedCount"].as_i64().unwrap_or(-1);
        println!(
            "{name}: {granted} granted, server usedCount {used} ({} of them still in flight)",
            view["inFlightCount"]
        );
        // Every 201 is in Postgres before it is sent (standard, flash mode A) or in the gate's
        // pending orders, which the view counts (mode B): the two agree exactly.
        if used != granted || used > args.uses {
            bail!(
                "{name}: {granted} granted, {used} held, total {}",
                args.uses
            );
        }
        let mut summary = summarize(&name, &answers, args.rate as f64);
        summary.held = Some(used);
        phases.push(summary);
    }
    if let Some(code) = sold_out_code {
        // Another stream than the sale's, so the late customers are not the same ones again.
        let later: Vec<Planned> = plan(args, total, args.seed.wrapping_add(1))
            .into_iter()
            .map(|mut p| {
                p.order = format!("late-{}", p.order);
                p
            })
            .collect();
        let answers = offer(
            http,
            reserve_requests(&a, std::slice::from_ref(&code), &later),
            args.rate,
            args.max_in_flight,
            "sold out",
        )
        .await;
        phases.push(summarize("flash, sold out", &answers, args.rate as f64));
    }
    let ceiling = phases[0].achieved;
    println!("\n| phase | offered req/s | achieved req/s | ratio to ceiling | p50 ms | p99 ms | winners' p99 ms | outcomes | to land at end, drain events/s |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for p in &phases {
        let outcomes: Vec<String> = p.outcomes.iter().map(|(o, n)| format!("{o} {n}")).collect();
        println!(
            "| {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
            p.name,
            p.offered,
            p.achieved,
            p.achieved / ceiling,
            p.p50,
            p.p99,
            p.winners_p99.map_or("".into(), |v| format!("{v:.2}")),
            outcomes.join(", "),
            p.drain
                .map_or("".into(), |(left, rate)| format!("{left}, {rate:.0}/s"))
        );
    }
    println!();
    for p in &phases {
        if let Some(held) = p.held {
            println!(
                "{}: {}",
                p.name,
                verdict(p.p99, p.winners_p99, held, args.uses)
            );
        }
    }
    // A failed run keeps its database to look into; a finished one leaves nothing behind.
    drop(processes);
    scratch.remove().await;
    Ok(())
}

/// The `flashgate` executable `--compare` starts: `--server-bin`, or the one built beside this
/// simulator (`cargo build --release` puts both in `target/release/`).
fn server_bin(args: &Args) -> anyhow::Result<std::path::PathBuf> {
    let bin = match &args.server_bin {
        Some(path) => path.into(),
        None => std::env::current_exe()?.with_file_name("flashgate"),
    };
    if !bin.is_file() {
        bail!(
            "{} not found: build it (`cargo build --release --bin flashgate`) or name one with --server-bin",
            bin.display()
        );
    }
    Ok(bin)
}

/// A `flashgate serve` process of `--compare`'s, killed when dropped.
struct ServerProcess(std::process::Child);

impl ServerProcess {
    /// Starts `bin serve` with exactly `env` (nothing else of this process's environment but
    /// `RUST_LOG`) on a free
    /// port, its output to `log`, and waits until it answers `GET /health/live`: the process
    /// and its base URL.
    async fn start(
        bin: &std::path::Path,
        env: &[(String, String)],
        log: &str,
        http: &reqwest::Client,
    ) -> anyhow::Result<(ServerProcess, String)> {
        // A port the kernel just handed out and took back: free unless another process takes it
        // in the moment before the server binds it (then the wait below fails and says so).
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let out = std::fs::File::create(log).with_context(|| format!("create {log}"))?;
        let child = std::process::Command::new(bin)
            .arg("serve")
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("PORT", port.to_string())
            .env("HOST", "127.0.0.1")
            // Warnings and errors only, as the wrk runners' servers log, unless asked otherwise.
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        let server = ServerProcess(child);
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let live = http.get(format!("{base}/health/live")).send().await;
            if live.is_ok_and(|r| r.status().is_success()) {
                return Ok((server, base));
            }
            if Instant::now() > deadline {
                bail!(
                    "{} serve did not answer on {base} in 120 s: see {log}",
                    bin.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.max_in_flight)
        .timeout(Duration::from_secs(60))
        .build()?;
    if args.campaign_codes.is_some() && !args.compare {
        bail!("--campaign-codes goes with --compare");
    }
    if args.compare {
        compare(&args, &http).await
    } else {
        sale(&args, &http, args.base_url.trim_end_matches('/')).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_repeats_its_plan_and_the_shares_hold() {
        let args = Args::parse_from(["flash-sale"]);
        let planned = plan(&args, 5_000, 42);
        assert_eq!(planned, plan(&args, 5_000, 42));
        assert_ne!(planned, plan(&args, 5_000, 43));
        let share =
            |k| planned.iter().filter(|p| p.kind == k).count() as f64 / planned.len() as f64;
        assert!((share(Kind::Retry) - args.retry_share).abs() < 0.02);
        assert!((share(Kind::Conflict) - args.conflict_share).abs() < 0.01);
        assert!(planned
            .iter()
            .all(|p| (1..=args.customers).contains(&p.customer)));
        // Each new order takes the next code of a campaign; a retry or a reused orderId keeps
        // its original's.
        let news: Vec<usize> = planned
            .iter()
            .filter(|p| p.kind == Kind::New)
            .map(|p| p.code)
            .collect();
        assert_eq!(news, (0..news.len()).collect::<Vec<_>>());
        let first: HashMap<&str, usize> = planned
            .iter()
            .filter(|p| p.kind == Kind::New)
            .map(|p| (p.order.as_str(), p.code))
            .collect();
        assert!(planned.iter().all(|p| first[p.order.as_str()] == p.code));
    }

    #[test]
    fn the_verdict_holds_the_sale_to_100_ms_and_its_uses() {
        let v = verdict(42.0, Some(99.9), 1000, 1000);
        assert!(
            v.contains(": met;") && v.contains("exactly all, none over"),
            "{v}"
        );
        // Either p99 at or past 100 ms misses.
        assert!(verdict(100.0, Some(10.0), 1000, 1000).contains("MISSED"));
        assert!(verdict(10.0, Some(100.5), 1000, 1000).contains("MISSED"));
        assert!(verdict(10.0, None, 990, 1000).contains("none over (10 left)"));
        assert!(verdict(10.0, Some(10.0), 1001, 1000).contains("OVER-ALLOCATED"));
    }
}
