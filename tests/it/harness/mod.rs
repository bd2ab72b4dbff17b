//! Test harness: each test gets its own fresh database and its own server, started in-process
//! on port 0, and talks to it over real HTTP.

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::{server, App, Settings};
use tokio::sync::oneshot;

/// Postgres server for tests, without a database name: each test appends its own.
pub fn postgres_base() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned())
        .trim_end_matches('/')
        .to_owned()
}

pub fn redis_url() -> String {
    std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// Starts one more server, HTTP only, on `settings` (a second process with another set-up,
/// e.g. a dead dependency), and returns its base URL.
pub async fn serve_with(settings: &[(&str, &str)]) -> String {
    let settings = Settings::from_lookup(|k| {
        settings
            .iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.to_string())
    })
    .unwrap();
    let app = App::new(&settings).unwrap();
    let (listener, addr) = server::bind("127.0.0.1", 0).await.unwrap();
    tokio::spawn(server::serve(
        listener,
        app,
        server::Background::NONE,
        std::future::pending(),
    ));
    format!("http://{addr}")
}

pub fn sqs_endpoint() -> String {
    std::env::var("TEST_SQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:9324".to_owned())
}

/// A queue and its dead-letter queue on the local SQS endpoint, named after the test.
/// Messages become visible again after 1 s and move to the DLQ after `max_receive` receives.
pub async fn create_queues(name: &str, max_receive: u32) -> (String, String) {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let sqs = shared::events::Events::new(
        "",
        Some(sqs_endpoint()),
        "us-east-1".into(),
        Duration::from_secs(10),
    );
    let client = sqs.client().await;
    let dlq = client
        .create_queue()
        .queue_name(format!("{name}-dlq"))
        .send()
        .await
        .expect("create DLQ");
    let dlq_url = dlq.queue_url().unwrap().to_owned();
    let attrs = client
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(A::QueueArn)
        .send()
        .await
        .unwrap();
    let arn = attrs.attributes().unwrap()[&A::QueueArn].clone();
    let queue = client
        .create_queue()
        .queue_name(name)
        .attributes(A::VisibilityTimeout, "1")
        .attributes(
            A::RedrivePolicy,
            json!({"deadLetterTargetArn": arn, "maxReceiveCount": max_receive}).to_string(),
        )
        .send()
        .await
        .expect("create queue");
    (queue.queue_url().unwrap().to_owned(), dlq_url)
}

pub struct TestApp {
    /// Vouchers created through [`TestApp::voucher`] are flash-sale ones.
    pub flash: bool,
    pub base: String,
    pub http: reqwest::Client,
    pub app: App,
    /// Direct connection to this test's database, for checks the API does not expose.
    pub db: tokio_postgres::Client,
    pub db_name: String,
    /// Present when spawned with `("PG_PROXY", "1")`: the server reaches Postgres through it.
    pub pg_proxy: Option<Proxy>,
    /// Present when spawned with `("REDIS_PROXY", "1")`: the server reaches Redis through it.
    pub redis_proxy: Option<Proxy>,
    /// Present when spawned with `("EVENTS", "1")` (mode B): the queue's dead-letter queue.
    pub dlq_url: Option<String>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl TestApp {
    pub async fn spawn() -> TestApp {
        Self::spawn_with(&[]).await
    }

    /// A server whose test vouchers are flash-sale ones when `flash`.
    pub async fn spawn_mode(flash: bool) -> TestApp {
        let mut app = Self::spawn_with(&[]).await;
        app.flash = flash;
        app
    }

    /// Starts a server with extra environment settings on top of the test defaults. Redis
    /// keys get this test's own prefix, so tests sharing one Redis never see each other.
    pub async fn spawn_with(vars: &[(&str, &str)]) -> TestApp {
        shared::telemetry::init_for_tests();
        let db_name = format!("fg_test_{}", uuid::Uuid::new_v4().simple());
        let url = format!("{}/{}", postgres_base(), db_name);
        let mut env: Vec<(String, String)> = vec![
            ("REDIS_URL".into(), redis_url()),
            ("REDIS_KEY_PREFIX".into(), format!("{db_name}:")),
            ("DATABASE_URL".into(), url.clone()),
            ("PORT".into(), "0".into()),
            // Thousands of requests queue for a handful of connections in the load tests.
            ("DATABASE_TIMEOUT_MS".into(), "30000".into()),
            ("DATABASE_POOL_SIZE".into(), "8".into()),
            // A debug build serving 2,000 requests at once on 2 cores can starve the Redis
            // driver task for longer than the production default; fault tests set their own.
            ("REDIS_TIMEOUT_MS".into(), "5000".into()),
            // Tests sweep when they mean to.
            ("SWEEP_INTERVAL_SECONDS".into(), "0".into()),
        ];
        env.extend(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let wants = |name: &str| vars.iter().any(|(k, v)| *k == name && *v == "1");
        let pg_proxy = if wants("PG_PROXY") {
            let proxy = Proxy::start("127.0.0.1:5432").await;
            let proxied = format!("postgres://postgres@{}/{}", proxy.addr, db_name);
            env.push(("DATABASE_URL".into(), proxied));
            Some(proxy)
        } else {
            None
        };
        let redis_proxy = if wants("REDIS_PROXY") {
            let target = redis_url()
                .trim_start_matches("redis://")
                .trim_end_matches('/')
                .to_owned();
            let proxy = Proxy::start(&target).await;
            env.push(("REDIS_URL".into(), format!("redis://{}", proxy.addr)));
            Some(proxy)
        } else {
            None
        };
        let dlq_url = if wants("EVENTS") {
            let max_receive = vars
                .iter()
                .find(|(k, _)| *k == "MAX_RECEIVE")
                .map_or(3, |(_, v)| v.parse().unwrap());
            let (queue, dlq) = create_queues(&db_name, max_receive).await;
            env.push(("EVENTS_QUEUE_URL".into(), queue));
            env.push(("SQS_ENDPOINT_URL".into(), sqs_endpoint()));
            // The local SQS is a single Python process: slow under a burst, not down.
            env.insert(0, ("EVENTS_TIMEOUT_MS".into(), "20000".into()));
            Some(dlq)
        } else {
            None
        };
        let lookup = |k: &str| {
            env.iter()
                .rev()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        let settings = Settings::from_lookup(lookup).expect("settings");
        let app = App::new(&settings).expect("app");
        app.prepare_database().await.expect("migrate");

        let (listener, addr) = server::bind("127.0.0.1", 0).await.expect("bind");
        let (tx, rx) = oneshot::channel::<()>();
        let served = app.clone();
        let background = server::Background::from_settings(&settings);
        tokio::spawn(async move {
            server::serve(listener, served, background, async {
                let _ = rx.await;
            })
            .await
            .expect("serve")
        });

        let (db, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connect test db");
        tokio::spawn(conn);
        TestApp {
            flash: false,
            base: format!("http://{addr}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            app,
            db,
            db_name,
            pg_proxy,
            redis_proxy,
            dlq_url,
            shutdown: Some(tx),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends a request and returns the status and the raw body text.
    pub async fn call(&self, method: &str, path: &str, body: Option<&str>) -> (StatusCode, String) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.http.request(method, self.url(path));
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_owned());
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        (status, resp.text().await.expect("body"))
    }

    pub async fn json(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let text = body.map(|b| b.to_string());
        let (status, text) = self.call(method, path, text.as_deref()).await;
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
        };
        (status, value)
    }

    /// Creates a voucher open now for a day; `overrides` replaces any field.
    pub async fn voucher(&self, code: &str, total_limit: i64, overrides: Value) -> Value {
        let now = chrono::Utc::now();
        let mut body = json!({
            "code": code,
            "discountAmount": 100_000,
            "minOrderAmount": 0,
            "totalLimit": total_limit,
            "perUserLimit": 1,
            "startsAt": (now - chrono::Duration::minutes(5)).to_rfc3339(),
            "endsAt": (now + chrono::Duration::days(1)).to_rfc3339(),
            "flashSale": self.flash,
        });
        for (k, v) in overrides.as_object().into_iter().flatten() {
            body[k] = v.clone();
        }
        let (status, view) = self.json("POST", "/vouchers", Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "create voucher: {view}");
        view
    }

    pub async fn reserve(
        &self,
        code: &str,
        customer: i64,
        order: &str,
        amount: i64,
    ) -> (StatusCode, String) {
        let body = json!({"customerId": customer, "orderId": order, "orderAmount": amount});
        self.call(
            "POST",
            &format!("/vouchers/{code}/reservations"),
            Some(&body.to_string()),
        )
        .await
    }

    pub async fn view(&self, code: &str) -> Value {
        let (status, v) = self.json("GET", &format!("/vouchers/{code}"), None).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v
    }

    /// A connection to the Redis this test's server uses.
    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(redis_url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// A Redis key of this test's voucher, e.g. `gate_key("TEN", "remaining")`.
    pub fn gate_key(&self, code: &str, suffix: &str) -> String {
        format!("{}:voucher:{{{code}}}:{suffix}", self.db_name)
    }

    /// Uses left according to the gate (None: not loaded).
    pub async fn gate_remaining(&self, code: &str) -> Option<i64> {
        let mut r = self.redis().await;
        redis::cmd("GET")
            .arg(self.gate_key(code, "remaining"))
            .query_async(&mut r)
            .await
            .unwrap()
    }

    /// Overwrites the gate's `remaining`, as drift would.
    pub async fn set_gate_remaining(&self, code: &str, remaining: i64) {
        let mut r = self.redis().await;
        let _: () = redis::cmd("SET")
            .arg(self.gate_key(code, "remaining"))
            .arg(remaining)
            .query_async(&mut r)
            .await
            .unwrap();
    }

    /// Deletes every gate key of this test: Redis "restarted empty" for this test alone.
    pub async fn flush_gate(&self) {
        let mut r = self.redis().await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}:*", self.db_name))
            .query_async(&mut r)
            .await
            .unwrap();
        if !keys.is_empty() {
            redis::cmd("DEL")
                .arg(keys)
                .query_async::<i64>(&mut r)
                .await
                .unwrap();
        }
    }

    /// Every row of every table, as text: equal snapshots mean nothing was written.
    pub async fn snapshot(&self) -> String {
        let mut out = String::new();
        for table in ["voucher", "voucher_customer", "redemption"] {
            let rows = self
                .db
                .simple_query(&format!("SELECT t::text FROM {table} t ORDER BY t::text"))
                .await
                .unwrap();
            for row in rows {
                if let tokio_postgres::SimpleQueryMessage::Row(r) = row {
                    out.push_str(r.get(0).unwrap_or(""));
                    out.push('\n');
                }
            }
        }
        out
    }

    /// Database-side facts for exact-count assertions.
    pub async fn counts(&self, code: &str) -> Counts {
        let row = self
            .db
            .query_one(
                "SELECT v.used_count,
                        (SELECT count(*) FROM redemption r WHERE r.voucher_code = v.code AND r.status IN (1, 2)),
                        (SELECT COALESCE(max(active), 0) FROM voucher_customer c WHERE c.voucher_code = v.code),
                        (SELECT COALESCE(max(n), 0) FROM (SELECT count(*) AS n FROM redemption r
                           WHERE r.voucher_code = v.code AND r.status IN (1, 2) GROUP BY r.customer_id) x),
                        (SELECT COALESCE(sum(active), 0) FROM voucher_customer c WHERE c.voucher_code = v.code)
                   FROM voucher v WHERE v.code = $1",
                &[&code],
            )
            .await
            .unwrap();
        Counts {
            used_count: row.get::<_, i32>(0) as i64,
            active_rows: row.get(1),
            max_customer_counter: row.get::<_, i32>(2) as i64,
            max_customer_rows: row.get(3),
            customer_counter_sum: row.get(4),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub struct Counts {
    pub used_count: i64,
    pub active_rows: i64,
    pub max_customer_counter: i64,
    pub max_customer_rows: i64,
    pub customer_counter_sum: i64,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// A TCP proxy in front of a real server, which a test can cut and restore: the dependency
/// "goes down" (open connections are closed, new ones refused) for this test alone.
pub struct Proxy {
    pub addr: SocketAddr,
    up: tokio::sync::watch::Sender<bool>,
}

impl Proxy {
    pub async fn start(target: &str) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, watch) = tokio::sync::watch::channel(true);
        let target = target.to_owned();
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if !*watch.borrow() {
                    drop(inbound);
                    continue;
                }
                let (target, mut watch) = (target.clone(), watch.clone());
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = watch.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Proxy { addr, up }
    }

    pub fn set_up(&self, up: bool) {
        self.up.send_replace(up);
    }
}
