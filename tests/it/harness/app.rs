//! A server of the service for one test, on the test's own database and Redis key prefix.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::config::DatabaseCredentials;
use shared::gate::GateMeta;
use shared::gate::Keys;
use shared::{server, App, Settings};
use tokio::sync::oneshot;

use super::{
    create_queues, fauxqs_endpoint, kafka_brokers, postgres_base, redis_url, sqs_endpoint,
    unique_name, voucher_code, Broker, Cleanup, Mode, Proxy,
};

/// The service's built-in defaults (nothing from the environment), with what every test
/// server changes: a free port, no background sweep, patient timeouts.
fn test_defaults() -> Settings {
    let mut s = super::settings::<&str, &str>(&[]);
    s.server.port = 0;
    // Thousands of requests queue for a handful of connections in the load tests.
    s.database.timeout = Duration::from_secs(30);
    s.database.pool_size = 8;
    // A debug build serving 2,000 requests at once on 2 cores can starve the Redis driver task
    // for longer than the production default; fault tests set their own.
    s.redis.timeout = Duration::from_secs(5);
    // Tests sweep when they mean to.
    s.sweep.interval = Duration::ZERO;
    s
}

/// Starts one more server, HTTP only, on the service's built-in defaults as `configure` leaves
/// them (a second process with another set-up, e.g. a dead dependency), and returns its base
/// URL. It has no database of its own: one it shares goes with the test that made it.
pub async fn serve_with(configure: impl FnOnce(&mut Settings)) -> String {
    let mut settings = super::settings::<&str, &str>(&[]);
    configure(&mut settings);
    let app = App::new(&settings).unwrap();
    let (listener, addr) = server::bind("127.0.0.1", 0).await.unwrap();
    tokio::spawn(server::serve(
        listener,
        app,
        server::Background::NONE,
        settings.server.clone(),
        std::future::pending(),
    ));
    format!("http://{addr}")
}

/// The password [`TestAppBuilder::with_app_role`] gives the role.
pub const APP_ROLE_PASSWORD: &str = "first-app-password";

/// A login as the migrate function reads it from the application role's secret.
pub fn app_role_login(username: &str, password: &str) -> DatabaseCredentials {
    DatabaseCredentials {
        username: username.to_owned(),
        password: password.to_owned().into(),
    }
}

/// A change of the settings ([`TestAppBuilder::configure`]).
type Configure = Box<dyn FnOnce(&mut Settings) + Send>;

/// How a [`TestApp`] is set up: the harness's own switches as methods, and the service's
/// settings through [`TestAppBuilder::configure`] on top of the test defaults.
#[must_use = "a builder does nothing until spawned"]
pub struct TestAppBuilder {
    flash: bool,
    counter_slots: Option<i64>,
    pg_proxy: bool,
    redis_proxy: bool,
    /// Mode B on SQS: the endpoint, and the queue's `maxReceiveCount`.
    events: Option<(String, u32)>,
    /// Mode B on Kafka, at these brokers.
    kafka: Option<String>,
    /// Direct reads of Postgres' tables ([`TestApp::counts`]) wait for the voucher's events to
    /// land ([`TestApp::settle`]): the contract tests in mode B compare the tables with what
    /// the API answered, and the tables hold a use only once its event has landed. Reads
    /// through the API never wait.
    settle_reads: bool,
    /// The server logs in as an application role of the test's own, which migrating created
    /// ([`TestAppBuilder::with_app_role`]).
    app_role: bool,
    configure: Vec<Configure>,
}

impl TestAppBuilder {
    /// Vouchers created through [`TestApp::voucher`] are flash-sale ones.
    pub fn flash(mut self, flash: bool) -> Self {
        self.flash = flash;
        self
    }

    /// Vouchers created through [`TestApp::voucher`] split their limit into `k` counter slots
    /// (by default the service chooses from the limit).
    pub fn counter_slots(mut self, k: i64) -> Self {
        self.counter_slots = Some(k);
        self
    }

    /// A test's [`Mode`]: flash or standard, the counter slots, group commit, mode B.
    pub fn mode(self, mode: Mode) -> Self {
        let mut builder = self
            .flash(mode.flash)
            .counter_slots(mode.slots)
            .configure(move |s| s.reservations.group_commit_max = mode.group_commit_max);
        builder.settle_reads = mode.mode_b.is_some();
        match mode.mode_b {
            None => builder,
            Some(Broker::Kafka) => builder.with_kafka(),
            Some(Broker::Sqs) => {
                builder.events = Some((fauxqs_endpoint(), 5));
                builder
            }
        }
    }

    /// The server reaches Postgres through a [`Proxy`] the test can cut ([`TestApp::pg_proxy`]).
    pub fn with_pg_proxy(mut self) -> Self {
        self.pg_proxy = true;
        self
    }

    /// The server reaches Redis through a [`Proxy`] the test can cut
    /// ([`TestApp::redis_proxy`]).
    pub fn with_redis_proxy(mut self) -> Self {
        self.redis_proxy = true;
        self
    }

    /// Mode B: a queue of the test's own and its dead-letter queue ([`TestApp::dlq_url`]),
    /// where a message moves after `max_receive` receives, and where the consumer sends one
    /// that can never land at once (`EVENTS_DLQ_URL`).
    pub fn with_events(mut self, max_receive: u32) -> Self {
        self.events = Some((sqs_endpoint(), max_receive));
        self
    }

    /// Mode B on the local Kafka broker: topics, dead-letter topic and consumer group of the
    /// test's own ([`TestApp::kafka`]).
    pub fn with_kafka(mut self) -> Self {
        self.kafka = Some(kafka_brokers());
        self
    }

    /// Mode B on Kafka brokers that never answer (nothing listens there): the broker is down.
    pub fn with_dead_kafka(mut self) -> Self {
        self.kafka = Some("127.0.0.1:1".to_owned());
        self
    }

    /// Migrates with an application role of the test's own configured (as the migrate function
    /// does with `APP_DATABASE_SECRET_ARN`), and serves logged in as that role, as the other
    /// functions do in AWS ([`TestApp::app_role`]). [`TestApp::db`] stays the migrator's.
    pub fn with_app_role(mut self) -> Self {
        self.app_role = true;
        self
    }

    /// Changes the service's settings, after the test defaults and the harness's switches
    /// (the proxies and mode B's queue are put in front of what it leaves).
    pub fn configure(mut self, change: impl FnOnce(&mut Settings) + Send + 'static) -> Self {
        self.configure.push(Box::new(change));
        self
    }

    /// Creates the database, migrates it, and starts the server. Redis keys get this test's
    /// own prefix, so tests sharing one Redis never see each other.
    pub async fn spawn(self) -> TestApp {
        shared::telemetry::init_for_tests();
        let db_name = unique_name("fg_test");
        let db_url = format!("{}/{db_name}", postgres_base());
        let key_prefix = format!("{db_name}:");
        // Made before anything is created, so a failure below still cleans up.
        let mut cleanup = Cleanup::database(&db_name);

        let mut settings = test_defaults();
        settings.database.url = db_url.clone().into();
        settings.redis.url = redis_url();
        settings.redis.key_prefix = key_prefix.clone();
        if self.events.is_some() {
            // The local SQS is a single Python process: slow under a burst, not down.
            settings.events.timeout = Duration::from_secs(20);
        }
        if let Some(brokers) = &self.kafka {
            let mut kafka = super::settings(&[("KAFKA_BROKERS", brokers)])
                .events
                .kafka
                .expect("Kafka settings");
            kafka.topic = db_name.clone();
            kafka.dlq_topic = format!("{db_name}-dlq");
            kafka.group = db_name.clone();
            kafka.partitions = 4;
            // The local broker misreports the end offset of a multi-record batch, and the
            // warm-up reads it (docs/BENCHMARKS.md, "Kafka locally").
            kafka.batch_messages = 1;
            // A consumer-group join waits about half of it on the local broker.
            kafka.session_timeout_ms = 2000;
            settings.events.kafka = Some(kafka);
            settings.events.timeout = Duration::from_secs(5);
        }
        for configure in self.configure {
            configure(&mut settings);
        }

        let pg_proxy = if self.pg_proxy {
            let (target, through) = via_proxy(settings.database.url());
            let proxy = Proxy::start(&target).await;
            settings.database.url = through(proxy.addr).into();
            Some(proxy)
        } else {
            None
        };
        let redis_proxy = if self.redis_proxy {
            let (target, through) = via_proxy(&settings.redis.url);
            let proxy = Proxy::start(&target).await;
            settings.redis.url = through(proxy.addr);
            Some(proxy)
        } else {
            None
        };
        let queues = if let Some((endpoint, max_receive)) = &self.events {
            let (queue, dlq) = create_queues(endpoint, &db_name, *max_receive).await;
            settings.events.queue_url = Some(queue.clone());
            settings.events.dlq_url = Some(dlq.clone());
            settings.events.sqs_endpoint_url = Some(endpoint.clone());
            Some((queue, dlq))
        } else {
            None
        };

        // Its keys are on the test Redis, or on the cluster's nodes.
        let mut nodes = vec![redis_url()];
        if settings.redis.cluster {
            nodes.extend(settings.redis.url.split(',').map(str::to_owned));
        }
        cleanup = cleanup.and_redis_keys(&nodes, &key_prefix);

        let app_role = self
            .app_role
            .then(|| app_role_login(&unique_name("fg_app"), APP_ROLE_PASSWORD));
        if let Some(role) = &app_role {
            cleanup = cleanup.and_role(&role.username);
        }
        settings.database.app_role = app_role.clone();
        let app = App::new(&settings).expect("app");
        app.prepare_database().await.expect("migrate");
        // The served app logs in as the role, and never migrates.
        let app = match &app_role {
            Some(role) => {
                settings.database.app_role = None;
                settings.database.credentials = Some(role.clone());
                App::new(&settings).expect("app as the application role")
            }
            None => app,
        };
        if self.kafka.as_deref() == Some(kafka_brokers().as_str()) {
            app.prepare_events().await.expect("Kafka topics");
        }
        let (listener, addr) = server::bind("127.0.0.1", 0).await.expect("bind");
        let (tx, rx) = oneshot::channel::<()>();
        let served = app.clone();
        let background = server::Background::from_settings(&settings);
        let limits = settings.server.clone();
        tokio::spawn(async move {
            server::serve(listener, served, background, limits, async {
                let _ = rx.await;
            })
            .await
            .expect("serve")
        });

        let (db, conn) = tokio_postgres::connect(&db_url, tokio_postgres::NoTls)
            .await
            .expect("connect test db");
        tokio::spawn(conn);
        TestApp {
            flash: self.flash,
            counter_slots: self.counter_slots,
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
            queues,
            settle_reads: self.settle_reads,
            app_role: app_role.map(|role| role.username),
            shutdown: Some(tx),
            _cleanup: cleanup,
        }
    }
}

/// Splits `scheme://[user@]host:port[/rest]` into the `host:port` a proxy forwards to, and a
/// function giving the same URL through a proxy at another address.
fn via_proxy(url: &str) -> (String, impl Fn(std::net::SocketAddr) -> String) {
    let (scheme, rest) = url.split_once("://").expect("URL with a scheme");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (user, host) = match authority.rsplit_once('@') {
        Some((user, host)) => (format!("{user}@"), host),
        None => (String::new(), authority),
    };
    let (scheme, path) = (scheme.to_owned(), path.to_owned());
    (host.to_owned(), move |proxy| {
        format!("{scheme}://{user}{proxy}{path}")
    })
}

pub struct TestApp {
    pub base: String,
    pub http: reqwest::Client,
    pub app: App,
    /// Direct connection to this test's database, for checks the API does not expose.
    pub db: tokio_postgres::Client,
    pub db_name: String,
    flash: bool,
    counter_slots: Option<i64>,
    pg_proxy: Option<Proxy>,
    redis_proxy: Option<Proxy>,
    /// Mode B on SQS: the queue and its dead-letter queue.
    queues: Option<(String, String)>,
    /// Mode B's contract tests: Postgres learns of flash winners after the answer, so reads of
    /// it wait for the events.
    settle_reads: bool,
    /// The role the server logs in as ([`TestAppBuilder::with_app_role`]).
    app_role: Option<String>,
    shutdown: Option<oneshot::Sender<()>>,
    /// Last on purpose: fields drop after [`Drop::drop`] has told the server to stop, in the
    /// order declared, so the database goes after everything else the test held.
    _cleanup: Cleanup,
}

impl TestApp {
    pub fn builder() -> TestAppBuilder {
        TestAppBuilder {
            flash: false,
            counter_slots: None,
            pg_proxy: false,
            redis_proxy: false,
            events: None,
            kafka: None,
            settle_reads: false,
            app_role: false,
            configure: Vec::new(),
        }
    }

    pub async fn spawn() -> TestApp {
        Self::builder().spawn().await
    }

    /// A server whose test vouchers are flash-sale ones when `flash`.
    pub async fn spawn_mode(flash: bool) -> TestApp {
        Self::builder().flash(flash).spawn().await
    }

    /// A server in this mode.
    pub async fn spawn_in(mode: Mode) -> TestApp {
        Self::builder().mode(mode).spawn().await
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// This test's database, reached directly (not through a proxy).
    pub fn database_url(&self) -> String {
        format!("{}/{}", postgres_base(), self.db_name)
    }

    /// Vouchers and campaigns this test creates are flash-sale ones.
    pub fn is_flash(&self) -> bool {
        self.flash
    }

    /// The application role the server logs in as ([`TestAppBuilder::with_app_role`]).
    pub fn app_role(&self) -> &str {
        self.app_role
            .as_deref()
            .expect("spawned without with_app_role()")
    }

    /// The prefix of this test's Redis keys.
    pub fn key_prefix(&self) -> String {
        format!("{}:", self.db_name)
    }

    /// The proxy in front of Postgres ([`TestAppBuilder::with_pg_proxy`]).
    pub fn pg_proxy(&self) -> &Proxy {
        self.pg_proxy
            .as_ref()
            .expect("spawned without with_pg_proxy()")
    }

    /// The proxy in front of Redis ([`TestAppBuilder::with_redis_proxy`]).
    pub fn redis_proxy(&self) -> &Proxy {
        self.redis_proxy
            .as_ref()
            .expect("spawned without with_redis_proxy()")
    }

    /// The dead-letter queue of mode B ([`TestAppBuilder::with_events`]).
    pub fn dlq_url(&self) -> &str {
        &self
            .queues
            .as_ref()
            .expect("spawned without with_events()")
            .1
    }

    /// The server's Kafka transport ([`TestAppBuilder::with_kafka`]).
    pub fn kafka(&self) -> &std::sync::Arc<shared::events::kafka::Kafka> {
        self.app.kafka().expect("spawned without with_kafka()")
    }

    /// Starts consuming the test's topic in this process, as `flashgate serve` does (for
    /// tests that spawned with `EVENTS_POLL=false` to hold events back first). Stops when
    /// the returned handle is dropped.
    pub fn start_kafka_consumer(&self) -> AbortOnDrop {
        use shared::events::Transport;
        let kafka = self.kafka().clone();
        let sink = std::sync::Arc::new(self.app.consumer().clone());
        AbortOnDrop(tokio::spawn(kafka.consume(sink)))
    }

    /// A client of the test's queue of mode B, apart from the server's.
    pub fn sqs(&self) -> shared::events::sqs::Sqs {
        super::sqs::client(
            &self
                .queues
                .as_ref()
                .expect("spawned without with_events()")
                .0,
        )
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

    /// `GET path` with `Accept: text/csv`: the status and the text.
    pub async fn csv(&self, path: &str) -> (StatusCode, String) {
        let resp = self
            .http
            .get(self.url(path))
            .header("accept", "text/csv")
            .send()
            .await
            .expect("request");
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
        if let Some(k) = self.counter_slots {
            // Never more slots than uses: the service refuses that.
            body["counterSlots"] = k.min(total_limit).into();
        }
        for (k, v) in overrides.as_object().into_iter().flatten() {
            body[k] = v.clone();
        }
        let (status, view) = self.create_voucher(body).await;
        assert_eq!(status, StatusCode::CREATED, "create voucher: {view}");
        view
    }

    pub async fn view(&self, code: &str) -> Value {
        let (status, v) = self.get_voucher(code).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v
    }

    /// Mode B: waits until every event of `code` has landed (none in flight, none pending in
    /// the gate), so that what Postgres says can be compared with what the API answered.
    pub async fn settle(&self, code: &str) {
        let Some(events) = self.app.events() else {
            return;
        };
        super::wait_for(
            &format!("the events of {code} to land"),
            Duration::from_secs(30),
            async || {
                events.in_flight(code).await.is_ok_and(|n| n == 0)
                    && self.gate_pending(code).await == 0
            },
        )
        .await;
    }

    /// Loads `code` into the gate from Postgres as the warm-up would, but without asking
    /// whether events are in flight (an operator forcing it); answers the uses it loaded.
    pub async fn force_load(&self, code: &str) -> i64 {
        let code = voucher_code(code);
        let source = self
            .app
            .store()
            .gate_source(&code, true)
            .await
            .unwrap()
            .expect("a voucher");
        let meta = GateMeta::of(
            &source.rules,
            source.reservation_ttl_seconds,
            source.version,
        );
        let gate = self.app.gate();
        let token = super::lock_gate(gate, &code).await;
        let loaded = gate
            .load(
                &code,
                token,
                &meta,
                super::load_counts(source.remaining, source.budget_left, &source.users, None),
            )
            .await
            .unwrap();
        assert_eq!(loaded, shared::gate::Loaded::Now);
        gate.unlock_loading(&code, token).await.unwrap();
        source.remaining
    }

    /// A connection to the Redis this test's server uses.
    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(redis_url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// The Redis keys of this test's voucher, as the gate names them.
    pub fn gate_keys(&self, code: &str) -> Keys {
        Keys::new(&self.key_prefix(), &voucher_code(code))
    }

    /// Uses left according to the gate (None: not loaded).
    pub async fn gate_remaining(&self, code: &str) -> Option<i64> {
        let mut r = self.redis().await;
        redis::cmd("GET")
            .arg(self.gate_keys(code).remaining)
            .query_async(&mut r)
            .await
            .unwrap()
    }

    /// Orders the gate holds that Postgres has not confirmed to it yet.
    /// Mode B: waits until every event of the flash-sale campaign `id` has landed (nothing in
    /// flight for its key, nothing pending in its gate). Nothing to wait for in mode A.
    pub async fn settle_campaign(&self, id: i64) {
        let Some(events) = self.app.events() else {
            return;
        };
        let key = shared::domain::campaign_key(id);
        let pending = Keys::campaign(&self.key_prefix(), id).pending;
        super::wait_for(
            &format!("the events of campaign {id} to land"),
            Duration::from_secs(30),
            async || {
                let mut r = self.redis().await;
                let left: i64 = redis::cmd("ZCARD")
                    .arg(&pending)
                    .query_async(&mut r)
                    .await
                    .unwrap();
                events.in_flight(&key).await.is_ok_and(|n| n == 0) && left == 0
            },
        )
        .await;
    }

    pub async fn gate_pending(&self, code: &str) -> i64 {
        let mut r = self.redis().await;
        redis::cmd("ZCARD")
            .arg(self.gate_keys(code).pending)
            .query_async(&mut r)
            .await
            .unwrap()
    }

    /// A field of the gate's `meta` hash of this voucher (None: not there).
    pub async fn gate_meta(&self, code: &str, field: &str) -> Option<String> {
        let mut r = self.redis().await;
        redis::cmd("HGET")
            .arg(self.gate_keys(code).meta)
            .arg(field)
            .query_async(&mut r)
            .await
            .unwrap()
    }

    /// Overwrites a field of the gate's `meta` hash, as a change that did not reach it would
    /// leave it.
    pub async fn set_gate_meta(&self, code: &str, field: &str, value: &str) {
        let mut r = self.redis().await;
        let _: () = redis::cmd("HSET")
            .arg(self.gate_keys(code).meta)
            .arg(field)
            .arg(value)
            .query_async(&mut r)
            .await
            .unwrap();
    }

    /// Overwrites the gate's `remaining`, as drift would.
    pub async fn set_gate_remaining(&self, code: &str, remaining: i64) {
        let mut r = self.redis().await;
        let _: () = redis::cmd("SET")
            .arg(self.gate_keys(code).remaining)
            .arg(remaining)
            .query_async(&mut r)
            .await
            .unwrap();
    }

    /// A long history in the gate: `n` tombstones of released orders, written straight into
    /// the voucher's `orders` hash in the entry format of `lua/entry.lua`.
    pub async fn gate_history(&self, code: &str, n: usize) {
        let mut r = self.redis().await;
        let orders = self.gate_keys(code).orders;
        for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
            let mut cmd = redis::cmd("HSET");
            cmd.arg(&orders);
            for i in chunk {
                cmd.arg(format!("old-{i}"))
                    .arg(format!("R|{}|1|2|10|100", 1_000_000 + i));
            }
            cmd.query_async::<i64>(&mut r).await.unwrap();
        }
    }

    /// How many Redis keys the gate holds for this voucher.
    pub async fn gate_key_count(&self, code: &str) -> usize {
        let mut r = self.redis().await;
        let pattern = format!(
            "{}voucher:{{{}}}:*",
            self.key_prefix(),
            voucher_code(code).as_str()
        );
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut r)
            .await
            .unwrap();
        keys.len()
    }

    /// A failover as the gate sees it: the voucher's `meta` says it was loaded into another
    /// copy of Redis' data than the one now serving (a replica promoted since, which may lack
    /// the last grants).
    pub async fn pretend_failover(&self, code: &str) {
        let mut r = self.redis().await;
        redis::cmd("HSET")
            .arg(self.gate_keys(code).meta)
            .arg("replid")
            .arg("0000000000000000000000000000000000000000")
            .query_async::<i64>(&mut r)
            .await
            .unwrap();
    }

    /// Deletes every gate key of this test: Redis "restarted empty" for this test alone. One
    /// `DEL` of them all, so the keys go at once, as in a restart.
    pub async fn flush_gate(&self) {
        let mut r = self.redis().await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", self.key_prefix()))
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
        for table in ["voucher", "voucher_slot", "voucher_customer", "redemption"] {
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
        if self.settle_reads {
            self.settle(code).await;
        }
        let row = self
            .db
            .query_one(
                "SELECT fg_used(v.code),
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
            used_count: row.get(0),
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
    /// Stops the server; the `_cleanup` field, dropped next, then removes the database and keys.
    ///
    /// The server is told to stop, not awaited: `Drop` cannot await, and on a single-threaded
    /// test runtime its task runs only once this returns. The database is dropped with `FORCE`
    /// for that reason: whatever the server still holds is cut off.
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// A background task that stops when dropped.
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// GET, confirm and release of an order nobody reserved: 404 RESERVATION_NOT_FOUND each.
pub async fn assert_never_reserved(app: &TestApp, code: &str, order: &str) {
    let answers = [
        app.get_reservation(code, order).await,
        app.confirm(code, order).await,
        app.release(code, order).await,
    ];
    for (status, body) in answers {
        assert_eq!(
            (status, &body["error"]),
            (StatusCode::NOT_FOUND, &json!("RESERVATION_NOT_FOUND")),
            "{body}"
        );
    }
}
