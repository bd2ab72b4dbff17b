//! Chaos: a flash sale under load while the server is killed (SIGKILL) and started again, Redis
//! is killed and started again empty, and Postgres is restarted (immediate shutdown); then the
//! promise is checked. Run by `scripts/chaos.sh`, which builds it and the server.
//!
//! Everything it breaks is its own: a Postgres cluster in a scratch directory and a Redis on a
//! free port, both started here, and `flashgate serve` as a child process. Mode B uses the SQS
//! endpoint given (`--sqs-endpoint`), with a queue of its own, or the Kafka brokers given
//! (`--kafka-brokers`), with a topic and consumer group of its own.
//!
//! Customers behave like an order service: reserve (the same orderId again on a 503 or a lost
//! connection), then confirm a 201 (again until it answers); one in five abandons its cart
//! instead, so its use must come back after the TTL. The checks, one line each:
//! 1. the largest `usedCount` Postgres ever showed (sampled every 50 ms) is within the limit;
//! 2. every order answered 201 could be confirmed (in mode B, one Postgres revoked after Redis
//!    lost its data is allowed only as a counted revocation);
//! 3. after TTL + grace the voucher has converged: every use held is a confirmed one;
//! 4. and the gate grants exactly the uses left, no more.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use serde_json::{json, Value};

#[derive(Parser, Debug, Clone)]
#[command(about = "A flash sale under SIGKILL, Redis loss and a Postgres restart; then checks")]
struct Args {
    /// The `flashgate` binary to run as the server.
    #[arg(long)]
    server_bin: PathBuf,
    /// Seconds of load; the faults fall at 20%, 45% and 70% of it.
    #[arg(long, default_value_t = 20)]
    duration: u64,
    /// The voucher's uses.
    #[arg(long, default_value_t = 300)]
    uses: i64,
    /// Customers, each with one order.
    #[arg(long, default_value_t = 400)]
    customers: i64,
    /// Customers in flight at once.
    #[arg(long, default_value_t = 24)]
    concurrency: usize,
    /// Reservation TTL (seconds): unconfirmed uses come back after it.
    #[arg(long, default_value_t = 15)]
    ttl: i64,
    /// Seconds past the TTL before the sweeper takes back a use whose row never came (mode B:
    /// beyond the queue's lag under this load).
    #[arg(long, default_value_t = 10)]
    grace: i64,
    /// Mode B over this SQS endpoint (mode A without).
    #[arg(long)]
    sqs_endpoint: Option<String>,
    /// Mode B over these Kafka bootstrap servers, with a topic of its own.
    #[arg(long, conflicts_with = "sqs_endpoint")]
    kafka_brokers: Option<String>,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Runs a Postgres tool, as the `postgres` user when we are root (Postgres refuses root).
fn pg_tool(bin: &Path, tool: &str, args: &[&str]) -> anyhow::Result<()> {
    let root = Command::new("id").arg("-u").output()?.stdout == b"0\n";
    let program = bin.join(tool);
    let status = if root {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(&program)
            .args(args)
            .stdout(Stdio::null())
            .status()?
    } else {
        Command::new(&program)
            .args(args)
            .stdout(Stdio::null())
            .status()?
    };
    if !status.success() {
        bail!("{tool} {args:?} failed: {status}");
    }
    Ok(())
}

struct Postgres {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
}

impl Postgres {
    fn start(scratch: &Path) -> anyhow::Result<Postgres> {
        let bin = ["/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.join("initdb").exists())
            .or_else(|| {
                let out = Command::new("pg_config").arg("--bindir").output().ok()?;
                Some(PathBuf::from(String::from_utf8(out.stdout).ok()?.trim()))
            })
            .context("no Postgres server binaries (initdb)")?;
        let dir = scratch.join("pg");
        std::fs::create_dir_all(&dir)?;
        // Postgres' own user must own its directory when we are root.
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(scratch)
            .status();
        let pg = Postgres {
            bin,
            dir,
            port: free_port()?,
        };
        let d = pg.dir.to_str().context("path")?;
        pg_tool(
            &pg.bin,
            "initdb",
            &["-D", d, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        )?;
        pg.ctl("start")?;
        Ok(pg)
    }

    fn ctl(&self, what: &str) -> anyhow::Result<()> {
        let d = self.dir.to_str().context("path")?;
        let opts = format!("-p {} -k {d} -c listen_addresses=127.0.0.1", self.port);
        let log = format!("{d}/server.log");
        match what {
            "start" => pg_tool(
                &self.bin,
                "pg_ctl",
                &["-D", d, "-o", &opts, "-l", &log, "-w", "start"],
            ),
            "restart" => pg_tool(
                &self.bin,
                "pg_ctl",
                &[
                    "-D",
                    d,
                    "-o",
                    &opts,
                    "-l",
                    &log,
                    "-m",
                    "immediate",
                    "-w",
                    "restart",
                ],
            ),
            _ => pg_tool(
                &self.bin,
                "pg_ctl",
                &["-D", d, "-m", "immediate", "-w", "stop"],
            ),
        }
    }

    fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }
}

struct Redis {
    port: u16,
    child: Child,
}

impl Redis {
    fn start(port: u16) -> anyhow::Result<Redis> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .context("redis-server")?;
        Ok(Redis { port, child })
    }

    /// SIGKILL, then a new one on the same port: empty.
    fn kill_and_restart(&mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        *self = Redis::start(self.port)?;
        Ok(())
    }
}

struct Server {
    bin: PathBuf,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
    base: String,
}

impl Server {
    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new(&self.bin)
            .arg("serve")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("flashgate serve")?;
        self.child = Some(child);
        Ok(())
    }

    fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill()?; // SIGKILL
            c.wait()?;
        }
        Ok(())
    }

    async fn wait_healthy(&self, http: &reqwest::Client) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(r) = http.get(format!("{}/health", self.base)).send().await {
                if r.status().is_success() {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "the server did not become healthy; see {}",
            self.log.display()
        )
    }
}

/// What one customer came to.
#[derive(Debug, Clone, Default)]
struct Outcome {
    order: String,
    reserved: bool,
    /// Never confirms: its use comes back after the TTL.
    abandoned: bool,
    confirmed: Option<u16>,
}

async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Option<(u16, Value)> {
    let mut req = http.request(method, url).timeout(Duration::from_secs(3));
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.ok()?;
    let status = resp.status().as_u16();
    let value = resp.json().await.unwrap_or(Value::Null);
    Some((status, value))
}

/// Until a definitive answer (anything but 503 or no answer) or the deadline.
async fn until_answered(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
    deadline: Instant,
) -> Option<(u16, Value)> {
    while Instant::now() < deadline {
        match call(http, method.clone(), url, body.clone()).await {
            Some((503, _)) | None => tokio::time::sleep(Duration::from_millis(50)).await,
            answer => return answer,
        }
    }
    None
}

async fn customer(
    http: reqwest::Client,
    base: String,
    code: String,
    order: String,
    n: i64,
    abandon: bool,
    deadline: Instant,
) -> Outcome {
    let body = json!({"customerId": n, "orderId": order, "orderAmount": 1000});
    let url = format!("{base}/vouchers/{code}/reservations");
    let reserved = until_answered(&http, reqwest::Method::POST, &url, Some(body), deadline).await;
    let mut out = Outcome {
        order: order.clone(),
        abandoned: abandon,
        ..Outcome::default()
    };
    if matches!(reserved, Some((201, _))) {
        out.reserved = true;
        if out.abandoned {
            return out;
        }
        let url = format!("{base}/vouchers/{code}/reservations/{order}/confirm");
        // Confirming may wait for the server to come back; give it time beyond the load.
        let confirm_deadline = deadline + Duration::from_secs(30);
        out.confirmed = until_answered(&http, reqwest::Method::POST, &url, None, confirm_deadline)
            .await
            .map(|(s, _)| s);
    }
    out
}

async fn used_count(db_url: &str, code: &str) -> Option<i64> {
    let (client, conn) = tokio_postgres::connect(db_url, tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(conn);
    let row = client
        .query_one("SELECT fg_used($1)", &[&code])
        .await
        .ok()?;
    Some(row.get(0))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mode = match (&args.sqs_endpoint, &args.kafka_brokers) {
        (Some(_), _) => "B",
        (_, Some(_)) => "B-kafka",
        _ => "A",
    };
    let scratch = std::env::temp_dir().join(format!("flashgate-chaos-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = run(&args, mode, &scratch).await;
    let _ = std::fs::remove_dir_all(&scratch);
    match result {
        Ok(true) => Ok(()),
        Ok(false) => std::process::exit(1),
        Err(e) => Err(e),
    }
}

async fn run(args: &Args, mode: &str, scratch: &Path) -> anyhow::Result<bool> {
    let pg = Postgres::start(scratch)?;
    let mut redis = Redis::start(free_port()?)?;
    let result = sale(args, mode, scratch, &pg, &mut redis).await;
    let _ = redis.child.kill();
    let _ = pg.ctl("stop");
    result
}

async fn sale(
    args: &Args,
    mode: &str,
    scratch: &Path,
    pg: &Postgres,
    redis: &mut Redis,
) -> anyhow::Result<bool> {
    let http = reqwest::Client::new();
    let db_url = pg.url("flashgate");
    let port = free_port()?;
    let mut env: Vec<(String, String)> = vec![
        ("DATABASE_URL".into(), db_url.clone()),
        (
            "REDIS_URL".into(),
            format!("redis://127.0.0.1:{}", redis.port),
        ),
        ("PORT".into(), port.to_string()),
        ("SWEEP_INTERVAL_SECONDS".into(), "1".into()),
        ("ORPHAN_GRACE_SECONDS".into(), args.grace.to_string()),
        ("SOLD_OUT_CACHE_MS".into(), "200".into()),
        ("DATABASE_TIMEOUT_MS".into(), "1000".into()),
        (
            "RUST_LOG".into(),
            std::env::var("CHAOS_SERVER_LOG").unwrap_or("warn".into()),
        ),
        ("AWS_ACCESS_KEY_ID".into(), "local".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "local".into()),
        ("AWS_REGION".into(), "us-east-1".into()),
    ];
    if let Some(endpoint) = &args.sqs_endpoint {
        let queue = format!("chaos-{}", std::process::id());
        env.push((
            "EVENTS_QUEUE_URL".into(),
            format!("{endpoint}/123456789012/{queue}"),
        ));
        env.push(("SQS_ENDPOINT_URL".into(), endpoint.clone()));
        env.push(("EVENTS_TIMEOUT_MS".into(), "3000".into()));
    }
    if let Some(brokers) = &args.kafka_brokers {
        let topic = format!("chaos-{}", std::process::id());
        for (name, value) in [
            ("KAFKA_BROKERS", brokers.clone()),
            ("KAFKA_TOPIC", topic.clone()),
            ("KAFKA_DLQ_TOPIC", format!("{topic}-dlq")),
            ("KAFKA_GROUP", topic),
            // The local broker misreports the end offset of a multi-record batch.
            ("KAFKA_BATCH_MESSAGES", "1".into()),
            // A killed server's consumer-group member holds its partitions this long.
            ("KAFKA_SESSION_TIMEOUT_MS", "2000".into()),
            ("EVENTS_TIMEOUT_MS", "3000".into()),
        ] {
            env.push((name.into(), value));
        }
    }
    // The database and the queue or topics, made once before the server starts.
    let map: HashMap<String, String> = env.iter().cloned().collect();
    let settings = shared::Settings::from_lookup(|k| map.get(k).cloned())?;
    let app = shared::App::new(&settings)?;
    app.prepare_database().await?;
    app.prepare_events().await?;
    let mut server = Server {
        bin: args.server_bin.clone(),
        env,
        log: scratch.join("server.log"),
        child: None,
        base: format!("http://127.0.0.1:{port}"),
    };
    server.spawn()?;
    server.wait_healthy(&http).await?;
    let result = checks(args, mode, pg, redis, &mut server, &http, &db_url).await;
    let _ = server.kill();
    if !matches!(result, Ok(true)) {
        let kept = PathBuf::from(format!("target/chaos-{mode}.log"));
        if std::fs::copy(&server.log, &kept).is_ok() {
            eprintln!("server log kept in {}", kept.display());
        }
        if let Ok(log) = std::fs::read_to_string(&server.log) {
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            eprintln!("server log (last lines):");
            for line in tail.into_iter().rev() {
                eprintln!("  {line}");
            }
        }
    }
    result
}

async fn checks(
    args: &Args,
    mode: &str,
    pg: &Postgres,
    redis: &mut Redis,
    server: &mut Server,
    http: &reqwest::Client,
    db_url: &str,
) -> anyhow::Result<bool> {
    let code = "CHAOS";
    let now = chrono::Utc::now();
    let (status, body) = call(
        http,
        reqwest::Method::POST,
        &format!("{}/vouchers", server.base),
        Some(json!({
            "code": code, "discountAmount": 100, "totalLimit": args.uses, "flashSale": true,
            "reservationTtlSeconds": args.ttl,
            "startsAt": (now - chrono::Duration::minutes(1)).to_rfc3339(),
            "endsAt": (now + chrono::Duration::hours(1)).to_rfc3339(),
        })),
    )
    .await
    .context("create the voucher")?;
    if status != 201 {
        bail!("create the voucher: {status} {body}");
    }

    // Load, with the largest usedCount sampled throughout.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.duration);
    let max_used = Arc::new(AtomicI64::new(0));
    let sampling = Arc::new(AtomicUsize::new(1));
    let sampler = {
        let (max_used, sampling, db_url) = (max_used.clone(), sampling.clone(), db_url.to_owned());
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) == 1 {
                if let Some(used) = used_count(&db_url, code).await {
                    max_used.fetch_max(used, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let next = Arc::new(AtomicUsize::new(1));
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (http, base, next, outcomes) = (
                http.clone(),
                server.base.clone(),
                next.clone(),
                outcomes.clone(),
            );
            let (customers, duration) = (args.customers, args.duration);
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed) as i64;
                    if n > customers {
                        break;
                    }
                    // Customers arrive spread over the sale.
                    let at = started
                        + Duration::from_millis(duration * 1000 * n as u64 / customers as u64);
                    tokio::time::sleep_until(at.into()).await;
                    let (order, abandon) = (format!("c{n}"), n % 5 == 0);
                    let out = customer(
                        http.clone(),
                        base.clone(),
                        code.into(),
                        order,
                        n,
                        abandon,
                        deadline,
                    )
                    .await;
                    outcomes.lock().unwrap().push(out);
                }
            })
        })
        .collect();

    // The faults.
    let at = |share: u64| started + Duration::from_millis(args.duration * 10 * share);
    tokio::time::sleep_until(at(20).into()).await;
    println!("chaos {mode}: SIGKILL the server");
    server.kill()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.spawn()?;
    server.wait_healthy(http).await?;
    tokio::time::sleep_until(at(45).into()).await;
    println!("chaos {mode}: SIGKILL Redis, start it again empty");
    redis.kill_and_restart()?;
    tokio::time::sleep_until(at(70).into()).await;
    println!("chaos {mode}: restart Postgres (immediate shutdown)");
    pg.ctl("restart")?;

    for w in workers {
        w.await?;
    }
    let outcomes = outcomes.lock().unwrap().clone();

    // Converged: after TTL + grace and a few sweeps, every use held is a confirmed one.
    let settle = Duration::from_secs((args.ttl + args.grace) as u64 + 3);
    tokio::time::sleep(settle).await;
    let view_url = format!("{}/vouchers/{code}", server.base);
    let view = |http: reqwest::Client, url: String| async move {
        until_answered(
            &http,
            reqwest::Method::GET,
            &url,
            None,
            Instant::now() + Duration::from_secs(20),
        )
        .await
        .map(|(_, v)| v)
        .unwrap_or(Value::Null)
    };
    let mut v = view(http.clone(), view_url.clone()).await;
    let converge_deadline = Instant::now() + Duration::from_secs(30);
    while v["usedCount"] != v["confirmedCount"] && Instant::now() < converge_deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        v = view(http.clone(), view_url.clone()).await;
    }
    sampling.store(0, Ordering::Relaxed);
    sampler.await?;

    let mut passed = 0;
    let mut failed = 0;
    let mut line = |ok: bool, text: String| {
        println!("chaos {mode}: {} {text}", if ok { "PASS" } else { "FAIL" });
        if ok {
            passed += 1
        } else {
            failed += 1
        }
    };
    let max = max_used.load(Ordering::Relaxed);
    line(
        max <= args.uses,
        format!("largest usedCount seen {max} <= limit {}", args.uses),
    );

    let granted = outcomes.iter().filter(|o| o.reserved).count() as i64;
    let to_confirm = outcomes
        .iter()
        .filter(|o| o.reserved && !o.abandoned)
        .count() as i64;
    let confirmed = outcomes.iter().filter(|o| o.confirmed == Some(200)).count() as i64;
    let revoked = v["revokedCount"].as_i64().unwrap_or(0);
    // Mode B after Redis lost its data may revoke a 201 (counted); mode A never.
    let allowed = if mode.starts_with('B') { revoked } else { 0 };
    let mut unconfirmed: HashMap<String, usize> = HashMap::new();
    for o in outcomes
        .iter()
        .filter(|o| o.reserved && !o.abandoned && o.confirmed != Some(200))
    {
        let answer = o
            .confirmed
            .map_or("no answer".to_owned(), |s| s.to_string());
        *unconfirmed.entry(answer).or_default() += 1;
        println!(
            "chaos {mode}: order {} answered 201, confirm answered {:?}",
            o.order, o.confirmed
        );
    }
    if !unconfirmed.is_empty() {
        println!("chaos {mode}: confirms that failed, by answer: {unconfirmed:?}");
    }
    line(
        to_confirm - confirmed <= allowed,
        format!("{confirmed} of the {to_confirm} orders answered 201 and not abandoned confirmed (revoked and counted: {revoked})"),
    );
    line(
        v["usedCount"] == v["confirmedCount"] && v["reservedCount"] == 0,
        format!(
            "converged after TTL + grace: usedCount {} = confirmedCount {}, reservedCount {}",
            v["usedCount"], v["confirmedCount"], v["reservedCount"]
        ),
    );

    // The gate grants exactly the uses left (to customers who confirm, so that they stay).
    let left = v["remaining"].as_i64().unwrap_or(-1);
    let late_deadline = Instant::now() + Duration::from_secs(20);
    let late: Vec<_> = (0..left + 5)
        .map(|i| {
            let (http, base) = (http.clone(), server.base.clone());
            let n = args.customers + 1 + i;
            let order = format!("late{n}");
            tokio::spawn(customer(
                http,
                base,
                code.into(),
                order,
                n,
                false,
                late_deadline,
            ))
        })
        .collect();
    let mut late_granted = 0;
    for t in late {
        let out = t.await?;
        if out.reserved && out.confirmed == Some(200) {
            late_granted += 1;
        }
    }
    // In mode B the events land through the queue: wait for the consumer (a local SQS emulator
    // is slow).
    let target = v["usedCount"].as_i64().unwrap_or(0) + late_granted;
    let mut final_used = -1;
    for _ in 0..360 {
        final_used = used_count(db_url, code).await.unwrap_or(-1);
        if final_used >= target {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if final_used != args.uses {
        if let Ok((client, conn)) = tokio_postgres::connect(db_url, tokio_postgres::NoTls).await {
            tokio::spawn(conn);
            if let Ok(rows) = client
                .query(
                    "SELECT status, coalesce(release_reason, ''), count(*) FROM redemption
                      WHERE voucher_code = $1 AND order_id LIKE 'late%' GROUP BY 1, 2",
                    &[&code],
                )
                .await
            {
                for r in rows {
                    let (st, reason, n): (i16, String, i64) = (r.get(0), r.get(1), r.get(2));
                    println!("chaos {mode}: late orders in Postgres: status {st} {reason}: {n}");
                }
            }
        }
    }
    line(
        late_granted == left && final_used == args.uses,
        format!("the gate granted exactly the {left} uses left ({late_granted} granted), usedCount {final_used} = limit {}", args.uses),
    );
    println!("chaos {mode}: {passed} passed, {failed} failed ({granted} granted of {} customers, {} s of load)", args.customers, args.duration);
    Ok(failed == 0)
}
