//! A Redis failover that loses acknowledged writes, on real Redis processes: a primary, a
//! replica that replicates through a proxy (so that the test can hold the replication stream
//! back), and the service reaching Redis through a second proxy, the primary endpoint, which a
//! failover moves to the promoted replica while dropping every open connection (ElastiCache's
//! behaviour). The grants made while replication was held back are lost with the primary:
//! the promoted node's `remaining` does not know them.
//!
//! The promise checked: every order answered 201 is confirmable afterwards, distinct 201s never
//! exceed the limit, and the gate is exact again (the limit is reached, not one short) within
//! seconds of the lost grants landing. Before `reserve.lua` compared the gate's replication id
//! with the node's, mode B answered 201 past the limit and the consumer revoked the extra ones.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use tokio::process::{Child, Command};

use crate::harness::{error_of, wait_for, Mode, Proxy, TestApp};
use crate::in_modes;

/// A free port on the loopback interface (the OS picks it; a race with another process taking
/// it in between is possible and would show as a start failure).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn redis_server(port: u16, replica_of: Option<&str>) -> Child {
    let mut command = Command::new("redis-server");
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
        // A full resync writes an RDB file where the server runs: keep it out of the tree.
        .args([
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ])
        .current_dir(std::env::temp_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if let Some(primary) = replica_of {
        let (host, port) = primary.split_once(':').unwrap();
        command.args(["--replicaof", host, port]);
    }
    command.spawn().expect("start redis-server")
}

async fn redis(addr: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://{addr}")).unwrap();
    for _ in 0..100 {
        if let Ok(conn) = client.get_multiplexed_async_connection().await {
            return conn;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("redis at {addr} did not start");
}

async fn replication(conn: &mut redis::aio::MultiplexedConnection) -> String {
    redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await
        .unwrap()
}

/// One primary, one replica behind the replication link's proxy, and the endpoint the service
/// uses.
struct Pair {
    primary: Child,
    primary_addr: String,
    replica_addr: String,
    _replica: Child,
    link: Proxy,
    endpoint: Proxy,
}

impl Pair {
    async fn start() -> Pair {
        let primary_addr = format!("127.0.0.1:{}", free_port());
        let primary = redis_server(
            primary_addr.rsplit(':').next().unwrap().parse().unwrap(),
            None,
        );
        redis(&primary_addr).await;
        let link = Proxy::start(&primary_addr).await;
        let replica_port = free_port();
        let replica_addr = format!("127.0.0.1:{replica_port}");
        let replica = redis_server(replica_port, Some(&link.addr.to_string()));
        let mut conn = redis(&replica_addr).await;
        wait_for("the replica's link", Duration::from_secs(10), async || {
            replication(&mut conn)
                .await
                .contains("master_link_status:up")
        })
        .await;
        let endpoint = Proxy::start(&primary_addr).await;
        Pair {
            primary,
            primary_addr,
            replica_addr,
            _replica: replica,
            link,
            endpoint,
        }
    }

    /// Waits until the replica acknowledged every write the primary has.
    async fn replicated(&self) {
        let mut primary = redis(&self.primary_addr).await;
        let acked: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(5000)
            .query_async(&mut primary)
            .await
            .unwrap();
        assert_eq!(acked, 1, "the replica caught up");
    }

    /// The primary dies; the replica, which missed what came since the link was held back, is
    /// promoted; the endpoint moves to it and drops every open connection.
    async fn fail_over(&mut self) {
        self.primary.kill().await.unwrap();
        let mut replica = redis(&self.replica_addr).await;
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query_async(&mut replica)
            .await
            .unwrap();
        self.endpoint.retarget(&self.replica_addr);
        self.endpoint.close_connections();
    }
}

in_modes!([
    mode_a = Mode::flash(),
    kafka = Mode::flash().mode_b(Broker::Kafka),
    sqs = Mode::flash().mode_b(Broker::Sqs),
] {
    a_failover_that_loses_grants_takes_no_201_back,
});

async fn a_failover_that_loses_grants_takes_no_201_back(mode: Mode) {
    const LIMIT: i64 = 40;
    let mut pair = Pair::start().await;
    let endpoint = format!("redis://{}", pair.endpoint.addr);
    let app = TestApp::builder()
        .mode(mode)
        .configure(move |s| {
            s.redis.url = endpoint;
            s.redis.timeout = Duration::from_secs(1);
        })
        .spawn()
        .await;
    app.voucher("FAILOVER", LIMIT, json!({})).await;
    let mut granted = BTreeSet::new();
    let reserve = async |customer: i64| {
        let order = format!("o{customer}");
        let (status, body) = app.reserve("FAILOVER", customer, &order, 1_000).await;
        (status, body, order)
    };
    // Half the uses, replicated.
    for customer in 1..=20 {
        let (status, body, order) = reserve(customer).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        granted.insert(order);
    }
    pair.replicated().await;
    // Replication held back: these grants are acknowledged by the primary alone.
    pair.link.set_up(false);
    for customer in 21..=30 {
        let (status, body, order) = reserve(customer).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        granted.insert(order);
    }
    pair.fail_over().await;

    // The sale goes on against the promoted node: 503 while the gate is repaired, then the
    // uses left, then OUT_OF_STOCK.
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut waiting: Vec<i64> = (31..=80).collect();
    let mut refused = 0;
    while !waiting.is_empty() {
        assert!(
            Instant::now() < deadline,
            "customers {waiting:?} still undecided"
        );
        let mut again = Vec::new();
        for customer in waiting {
            let (status, body, order) = reserve(customer).await;
            match status {
                StatusCode::CREATED => {
                    granted.insert(order);
                }
                StatusCode::CONFLICT => {
                    assert_eq!(error_of(&body), "OUT_OF_STOCK", "{body}");
                    refused += 1;
                }
                StatusCode::SERVICE_UNAVAILABLE => again.push(customer),
                other => panic!("customer {customer}: {other} {body}"),
            }
        }
        waiting = again;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        granted.len() as i64 <= LIMIT,
        "{} distinct 201s over a limit of {LIMIT}",
        granted.len()
    );

    // Every 201 lands and is confirmable: none was revoked.
    wait_for("the grants to land", Duration::from_secs(30), async || {
        app.counts("FAILOVER").await.used_count == granted.len() as i64
    })
    .await;
    for order in &granted {
        let (status, body) = app.confirm("FAILOVER", order).await;
        assert_eq!(
            (status, &body["status"]),
            (StatusCode::OK, &json!("CONFIRMED")),
            "{order} was told 201: {body}"
        );
    }
    let revoked: i64 = app
        .db
        .query_one(
            "SELECT count(*) FROM redemption WHERE release_reason = 'REVOKED'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(revoked, 0);
    // Exact again: the repaired gate handed out exactly the uses left, no fewer.
    assert_eq!(
        (granted.len() as i64, refused),
        (LIMIT, 80 - LIMIT),
        "every use sold once"
    );
    let view = app.view("FAILOVER").await;
    assert_eq!(view["usedCount"], LIMIT);
}
