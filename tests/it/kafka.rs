//! Mode B on Kafka against a real Kafka-protocol broker (the one `scripts/services.sh kafka`
//! starts), real Redis and real Postgres. Each test has its own topic, dead-letter topic and
//! consumer group (the HTTP contract runs on Kafka too: tests/it/api.rs). The same faults as on
//! SQS (tests/it/events.rs), with exact counts: a broker down, a process killed between the
//! gate and the send, duplicates and reordering, a consumer killed before it committed,
//! Postgres down while events queue, Redis emptied with events in flight, poison records; and
//! the warm-up waiting only for the voucher's own partition.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::message::Headers as _;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message as _, Offset, TopicPartitionList};
use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::events::kafka::partition_for;
use shared::events::{ReservedEvent, Transport as _};
use shared::gate::Unit;

use crate::harness::{
    assert_never_reserved, kafka_brokers, reserve_req, reserved_event, voucher_code, wait_for,
    TestApp,
};

/// Partitions of every test topic (the harness's `KAFKA_PARTITIONS`).
const PARTITIONS: i32 = 4;

fn producer() -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("allow.auto.create.topics", "false")
        .set("batch.num.messages", "1")
        .create()
        .expect("test producer")
}

/// Writes `payload` to the test's topic, on the partition of `key` as the service computes it.
async fn produce(producer: &FutureProducer, topic: &str, key: &str, payload: &[u8]) {
    producer
        .send(
            FutureRecord::to(topic)
                .key(key)
                .payload(payload)
                .partition(partition_for(key, PARTITIONS)),
            Duration::from_secs(10),
        )
        .await
        .expect("produce");
}

/// Every record of `topic` from its start (without joining any group), as (key, payload,
/// `error` header), once `n` have come or `limit` has passed.
async fn read_topic(
    topic: &str,
    partitions: i32,
    n: usize,
    limit: Duration,
) -> Vec<(String, Vec<u8>, Option<String>)> {
    let reader: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .set("group.id", format!("{topic}-reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("test reader");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    reader.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let deadline = Instant::now() + limit;
    while out.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Ok(m)) = tokio::time::timeout(left, reader.recv()).await else {
            break;
        };
        let error = m.headers().and_then(|h| {
            h.iter()
                .find(|h| h.key == "error")
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        });
        out.push((
            String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
            m.payload().unwrap_or_default().to_vec(),
            error,
        ));
    }
    out
}

fn topic(app: &TestApp) -> String {
    app.kafka().topic().to_owned()
}

async fn in_flight(app: &TestApp, code: &str) -> u64 {
    app.kafka().in_flight(code).await.unwrap()
}

async fn revoked(app: &TestApp, code: &str) -> i64 {
    app.view(code).await["revokedCount"].as_i64().unwrap()
}

/// Two voucher codes whose events go to different partitions.
fn codes_on_two_partitions() -> (String, String) {
    let first = "PART0".to_owned();
    let p = partition_for(&first, PARTITIONS);
    let other = (1..100)
        .map(|i| format!("PART{i}"))
        .find(|c| partition_for(c, PARTITIONS) != p)
        .expect("another partition");
    (first, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn duplicates_reordering_and_poison_records_land_once_and_poison_goes_to_the_dead_letter_topic(
) {
    let app = TestApp::builder()
        .with_kafka()
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    app.voucher("KDUP", 20, json!({"flashSale": true, "perUserLimit": 5}))
        .await;
    for i in 1..=20 {
        app.app
            .reservations()
            .reserve(&reserve_req("KDUP", 1 + i % 7, &format!("o{i}")))
            .await
            .unwrap();
    }
    let topic = topic(&app);
    let sent = read_topic(&topic, PARTITIONS, 20, Duration::from_secs(10)).await;
    assert_eq!(sent.len(), 20);
    // Every event again, newest first, then two records that can never land.
    let producer = producer();
    for (key, payload, _) in sent.iter().rev() {
        produce(&producer, &topic, key, payload).await;
    }
    produce(&producer, &topic, "KDUP", b"{not json").await;
    let mut unknown: ReservedEvent = serde_json::from_slice(&sent[0].1).unwrap();
    unknown.code = "NOSUCHVOUCHER".into();
    produce(&producer, &topic, "KDUP", unknown.to_json().as_bytes()).await;

    let _consumer = app.start_kafka_consumer();
    wait_for("the events to land", Duration::from_secs(30), async || {
        in_flight(&app, "KDUP").await == 0
    })
    .await;
    let counts = app.counts("KDUP").await;
    assert_eq!((counts.used_count, counts.active_rows), (20, 20));
    assert_eq!(counts.customer_counter_sum, 20);
    let dead = read_topic(app.kafka().dlq_topic(), 1, 3, Duration::from_secs(3)).await;
    assert_eq!(dead.len(), 2, "exactly the two poison records");
    assert_eq!(dead[0].1, b"{not json");
    assert!(
        dead[0].2.as_deref().unwrap().contains("not an event"),
        "{:?}",
        dead[0].2
    );
    assert!(
        dead[1].2.as_deref().unwrap().contains("poison"),
        "{:?}",
        dead[1].2
    );
    assert_eq!(revoked(&app, "KDUP").await, 0);
}

/// Records that can never land, between good ones on one partition: each goes to the
/// dead-letter topic at once, naming its field, and never holds up the records behind it. (A
/// `customerId` of 0 used to fail in Postgres' CHECK, be retried, and stop the partition.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_out_of_range_go_to_the_dead_letter_topic_at_once_and_the_rest_lands() {
    let app = TestApp::builder()
        .with_kafka()
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    app.voucher("KBAD", 10, json!({"flashSale": true, "perUserLimit": 5}))
        .await;
    let now = chrono::Utc::now().timestamp_millis();
    let event = |customer: i64, order: &str| reserved_event("KBAD", customer, order, now);
    let mut no_customer = event(1, "bad-customer");
    no_customer.customer_id = 0;
    let mut negative = event(2, "bad-amount");
    negative.order_amount = -1;
    let mut far = event(3, "bad-expiry");
    far.expires_at_ms = 9_000_000_000_000_000; // 285 million years on: no timestamp at all
    let mut backwards = event(4, "bad-order");
    backwards.expires_at_ms = now - 1;
    // A time Postgres holds, but ten days on where the voucher's TTL is 15 minutes: the check
    // against the voucher's rules refuses it (and fg_merge would).
    let mut held_for_days = event(5, "bad-ttl");
    held_for_days.expires_at_ms = now + 10 * 86_400_000;
    // A discount the voucher's rules never give (10 off an order of 10).
    let mut forged = event(5, "bad-discount");
    forged.discount_amount = 9;
    let records = [
        event(1, "g1"),
        no_customer,
        event(2, "g2"),
        negative,
        event(3, "g3"),
        far,
        backwards,
        event(4, "g4"),
        held_for_days,
        forged,
    ];
    let (topic, producer) = (topic(&app), producer());
    for record in &records {
        produce(&producer, &topic, "KBAD", record.to_json().as_bytes()).await;
    }

    let started = Instant::now();
    let _consumer = app.start_kafka_consumer();
    wait_for(
        "the good records to land",
        Duration::from_secs(20),
        async || app.counts("KBAD").await.active_rows == 4,
    )
    .await;
    wait_for(
        "the partition to be read to its end",
        Duration::from_secs(10),
        async || in_flight(&app, "KBAD").await == 0,
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the bad records held up the partition for {:?}",
        started.elapsed()
    );
    let dead = read_topic(app.kafka().dlq_topic(), 1, 7, Duration::from_secs(3)).await;
    let reasons: Vec<String> = dead.iter().map(|d| d.2.clone().unwrap()).collect();
    assert_eq!(dead.len(), 6, "exactly the six bad records: {reasons:?}");
    for (reason, field) in reasons.iter().zip([
        "customerId",
        "orderAmount",
        "expiresAtMs",
        "expiresAtMs",
        "reservation TTL",
        "discountAmount",
    ]) {
        assert!(reason.contains(field), "{reason} should name {field}");
    }
    assert_eq!(app.counts("KBAD").await.used_count, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_killed_after_merging_but_before_committing_is_read_again_and_lands_once() {
    let app = TestApp::builder()
        .with_kafka()
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    app.voucher("KKILL", 30, json!({"flashSale": true})).await;
    for i in 1..=30 {
        assert_eq!(
            app.reserve("KKILL", i, &format!("o{i}"), 10).await.0,
            StatusCode::CREATED
        );
    }
    // A member of the group takes the records, merges half of them into Postgres, and dies
    // before it commits an offset.
    let topic = topic(&app);
    let sent = read_topic(&topic, PARTITIONS, 30, Duration::from_secs(10)).await;
    assert_eq!(sent.len(), 30);
    let bodies: Vec<String> = sent[..15]
        .iter()
        .map(|(_, p, _)| String::from_utf8(p.clone()).unwrap())
        .collect();
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    for result in app.app.consumer().consume_all(&refs).await {
        result.unwrap();
    }
    assert_eq!(app.counts("KKILL").await.used_count, 15);
    assert_eq!(in_flight(&app, "KKILL").await, 30, "nothing committed");

    // The next member reads everything again: the 15 merged ones change nothing.
    let _consumer = app.start_kafka_consumer();
    wait_for(
        "the partition's lag to reach 0",
        Duration::from_secs(30),
        async || in_flight(&app, "KKILL").await == 0,
    )
    .await;
    let counts = app.counts("KKILL").await;
    assert_eq!(
        (
            counts.used_count,
            counts.active_rows,
            counts.customer_counter_sum
        ),
        (30, 30, 30)
    );
    assert_eq!(app.view("KKILL").await["remaining"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_down_while_500_events_queue_up_on_kafka_then_all_land() {
    let app = Arc::new(
        TestApp::builder()
            .with_kafka()
            .with_pg_proxy()
            .configure(|s| s.database.timeout = Duration::from_millis(500))
            .spawn()
            .await,
    );
    crate::events::postgres_down_while_500_events_queue_up(app, 64).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn broker_down_answers_503_fast_and_the_order_comes_back_through_the_orphan_sweep() {
    let app = TestApp::builder()
        .with_dead_kafka()
        .configure(|s| {
            s.events.timeout = Duration::from_millis(1000);
            s.sweep.orphan_grace = Duration::ZERO;
        })
        .spawn()
        .await;
    app.voucher(
        "KDOWN",
        5,
        json!({"flashSale": true, "reservationTtlSeconds": 1}),
    )
    .await;
    // Loaded at creation: a voucher the gate never held has no events on the way, so its
    // warm-up needs no word from the broker.
    assert_eq!(app.gate_remaining("KDOWN").await, Some(5));
    let code = voucher_code("KDOWN");

    let started = Instant::now();
    let (status, body) = app.reserve("KDOWN", 1, "sent", 10).await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(took < Duration::from_secs(3), "answered in {took:?}");
    // And a process killed between the gate and the send: the gate holds a use, nothing
    // was sent.
    let now = chrono::Utc::now().timestamp_millis();
    app.app
        .gate()
        .reserve(&code, 2, "killed", 10, now)
        .await
        .unwrap();
    assert_eq!(app.gate_remaining("KDOWN").await, Some(3));

    // Past the reservation's TTL both are orphans: their uses come back.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.orphans_recovered, 2);
    assert_eq!(app.gate_remaining("KDOWN").await, Some(5));
    assert_eq!(app.counts("KDOWN").await.used_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_warm_up_waits_only_for_events_of_its_own_partition() {
    let app = TestApp::builder()
        .with_kafka()
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    let (busy, idle) = codes_on_two_partitions();
    app.voucher(&busy, 10, json!({"flashSale": true})).await;
    app.voucher(&idle, 10, json!({"flashSale": true})).await;
    for i in 1..=3 {
        assert_eq!(
            app.reserve(&busy, i, &format!("o{i}"), 10).await.0,
            StatusCode::CREATED
        );
    }
    assert_eq!(in_flight(&app, &busy).await, 3);
    assert_eq!(in_flight(&app, &idle).await, 0);

    // Redis restarts empty: the idle voucher loads once a send timeout has passed (a grant
    // lost with the data may have been in its send), the busy one waits for its events.
    app.flush_gate().await;
    let (status, body) = app.warmup(&busy).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let (status, _) = app.warmup(&idle).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "within the send timeout"
    );
    wait_for(
        "the idle voucher to load",
        Duration::from_secs(15),
        async || app.warmup(&idle).await.0 == StatusCode::OK,
    )
    .await;
    assert_eq!(app.gate_remaining(&idle).await, Some(10));
    let (status, body) = app.warmup(&busy).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        app.reserve(&busy, 9, "late", 10).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );

    let _consumer = app.start_kafka_consumer();
    wait_for(
        "the busy partition to drain",
        Duration::from_secs(30),
        async || in_flight(&app, &busy).await == 0,
    )
    .await;
    let (status, body) = app.warmup(&busy).await;
    assert_eq!((status, &body["remaining"]), (StatusCode::OK, &json!(7)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_emptied_with_events_on_kafka_never_over_allocates_and_counts_revocations() {
    let app = TestApp::builder()
        .with_kafka()
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    app.voucher("KLOST", 100, json!({"flashSale": true})).await;
    for i in 1..=100 {
        app.app
            .reservations()
            .reserve(&reserve_req("KLOST", i, &format!("o{i}")))
            .await
            .unwrap();
    }
    app.flush_gate().await;
    // Loading now would count the 100 in flight twice: warm-up waits for them.
    let (status, body) = app.warmup("KLOST").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("UNAVAILABLE"))
    );
    // Suppose it is loaded anyway (an operator forcing it): the gate offers 100 uses that the
    // events on the topic already hold, and hands 50 of them out again.
    assert_eq!(app.force_load("KLOST").await, 100);
    for i in 201..=250 {
        app.app
            .reservations()
            .reserve(&reserve_req("KLOST", i, &format!("n{i}")))
            .await
            .unwrap();
    }
    let _consumer = app.start_kafka_consumer();
    wait_for("150 events to land", Duration::from_secs(30), async || {
        in_flight(&app, "KLOST").await == 0
    })
    .await;
    // Postgres held the line: never past 100, and every refusal is stored and counted.
    let counts = app.counts("KLOST").await;
    assert_eq!((counts.used_count, counts.active_rows), (100, 100));
    assert_eq!(revoked(&app, "KLOST").await, 50);
}

/// Lambda's MSK event source: records arrive base64-encoded, grouped by partition. A poison
/// record goes to the dead-letter topic and the batch succeeds; with Postgres down the batch
/// fails whole, for the event source to retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_msk_handler_lands_a_batch_and_dead_letters_its_poison_record() {
    let app = TestApp::builder()
        .with_kafka()
        .with_pg_proxy()
        .configure(|s| {
            s.database.timeout = Duration::from_millis(500);
            s.events.poll = false;
        })
        .spawn()
        .await;
    app.voucher("KMSK", 10, json!({"flashSale": true})).await;
    let code = voucher_code("KMSK");
    let now = chrono::Utc::now().timestamp_millis();
    let mut values = Vec::new();
    for i in 1..=3 {
        let r = reserve_req("KMSK", i, &format!("o{i}"));
        let reply = app
            .app
            .gate()
            .reserve(&code, i, r.order_id.as_str(), 10, now)
            .await
            .unwrap();
        let held = reply.held.expect("granted");
        let event = ReservedEvent::new(&r, held, reply.rules_version, None);
        values.push(event.to_json().into_bytes());
    }
    values.push(b"poison".to_vec());
    let b64 = |v: &[u8]| base64::engine::general_purpose::STANDARD.encode(v);
    let partition = partition_for("KMSK", PARTITIONS);
    let records: Vec<Value> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            json!({"topic": topic(&app), "partition": partition, "offset": i,
                   "timestamp": now, "timestampType": "CREATE_TIME",
                   "key": b64(b"KMSK"), "value": b64(v), "headers": []})
        })
        .collect();
    let event: aws_lambda_events::kafka::KafkaEvent = serde_json::from_value(json!({
        "eventSource": "aws:kafka",
        "records": { format!("{}-{partition}", topic(&app)): records },
    }))
    .unwrap();

    app.pg_proxy().set_up(false);
    let failed = app
        .kafka()
        .handle_msk(app.app.consumer(), event.clone())
        .await
        .unwrap_err();
    assert_eq!((failed.failed, failed.total), (3, 4));
    app.pg_proxy().set_up(true);

    assert_eq!(
        app.kafka()
            .handle_msk(app.app.consumer(), event)
            .await
            .unwrap(),
        4
    );
    assert_eq!(app.counts("KMSK").await.used_count, 3);
    let dead = read_topic(app.kafka().dlq_topic(), 1, 3, Duration::from_secs(3)).await;
    // Once from the failed try (the poison was already known to be poison), once now.
    assert_eq!(dead.len(), 2);
    assert!(dead
        .iter()
        .all(|(key, payload, _)| key == "KMSK" && payload == b"poison"));
}

/// Read your writes in mode B on Kafka: a reservation reads back as its 201 said at once, from
/// the gate, while its record is unconsumed, and the same once it has landed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reservation_reads_back_at_once_while_its_record_is_unconsumed() {
    let app = TestApp::builder()
        .with_kafka()
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    app.voucher("KREAD", 5, json!({"flashSale": true})).await;
    let (status, reserved) = app.reserve("KREAD", 1, "a", 111).await;
    assert_eq!(status, StatusCode::CREATED);
    let reserved: Value = serde_json::from_str(&reserved).unwrap();
    assert_eq!(app.counts("KREAD").await.active_rows, 0, "nothing landed");

    assert_eq!(
        app.get_reservation("KREAD", "a").await,
        (StatusCode::OK, reserved.clone())
    );
    // The gate holds every order it granted: one it does not know never existed, and says so
    // at once although a record is unconsumed (this used to answer 503).
    assert_never_reserved(&app, "KREAD", "never").await;

    let _consumer = app.start_kafka_consumer();
    wait_for("the record to land", Duration::from_secs(30), async || {
        app.counts("KREAD").await.active_rows == 1
    })
    .await;
    assert_eq!(
        app.get_reservation("KREAD", "a").await,
        (StatusCode::OK, reserved)
    );
}

/// The codes of two vouchers Kafka puts on one partition.
fn codes_on_one_partition() -> (String, String) {
    let first = "SHARE0".to_owned();
    let p = partition_for(&first, PARTITIONS);
    let second = (1..1000)
        .map(|i| format!("SHARE{i}"))
        .find(|c| partition_for(c, PARTITIONS) == p)
        .expect("a code on the same partition");
    (first, second)
}

/// Two vouchers forced to one partition: under a running sale on one, whose records wait
/// there, the other (the gate never held it, so none of its events can be on the way) loads at
/// creation and grants its first reserve in milliseconds. The warm-up used to wait for the
/// partition's lag and answer 503 "loading".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_voucher_on_a_busy_partition_loads_and_grants_at_once() {
    let app = TestApp::builder()
        .with_kafka()
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    let (busy, next) = codes_on_one_partition();
    app.voucher(&busy, 10, json!({"flashSale": true})).await;
    for i in 1..=3 {
        assert_eq!(
            app.reserve(&busy, i, &format!("o{i}"), 10).await.0,
            StatusCode::CREATED
        );
    }
    assert_eq!(in_flight(&app, &next).await, 3, "the partition is busy");

    app.voucher(&next, 10, json!({"flashSale": true})).await;
    assert_eq!(
        app.gate_remaining(&next).await,
        Some(10),
        "loaded at creation"
    );
    let started = Instant::now();
    let (status, body) = app.reserve(&next, 1, "n1", 10).await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(took < Duration::from_millis(500), "{took:?}");
    assert_eq!(in_flight(&app, &next).await, 4);
}

/// Two vouchers forced to one partition: while one sale's records wait there, a reserve of the
/// other, ended voucher is refused at once (422 EXPIRED) by Postgres, which answers for a sale
/// that is over, without loading it; it used to wait on the partition's lag and answer 503
/// "loading".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_voucher_sharing_a_busy_partition_is_refused_by_its_rules_without_loading() {
    let app = TestApp::builder()
        .with_kafka()
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    let (busy, ended) = codes_on_one_partition();
    app.voucher(&busy, 10, json!({"flashSale": true})).await;
    assert_eq!(app.reserve(&busy, 1, "o1", 10).await.0, StatusCode::CREATED);
    assert!(in_flight(&app, &busy).await > 0);

    let now = chrono::Utc::now();
    let at = |minutes: i64| (now + chrono::Duration::minutes(minutes)).to_rfc3339();
    app.voucher(
        &ended,
        10,
        json!({"flashSale": true, "startsAt": at(-120), "endsAt": at(-60)}),
    )
    .await;
    assert!(
        in_flight(&app, &ended).await > 0,
        "the busy sale's record is ahead of it"
    );
    let (status, body) = app.reserve(&ended, 2, "o2", 10).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.contains("EXPIRED"), "{body}");
    assert_eq!(app.gate_remaining(&ended).await, None, "not loaded");
}

/// A flash-sale campaign's gate is one unit on Kafka too: every code's event goes to the
/// campaign's partition (one lag to wait for), its orders are read back, confirmed and released
/// before their events land, the views count them in flight, and a campaign gate lost with
/// events on the way is loaded again only once they have landed, counting each use once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flash_campaigns_events_share_its_partition_and_its_orders_answer_before_they_land() {
    let app = TestApp::builder()
        .with_kafka()
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    let now = chrono::Utc::now();
    let codes = ["KC-1", "KC-2", "KC-3", "KC-4", "KC-5", "KC-6"];
    let (status, view) = app
        .create_campaign(json!({
            "discountAmount": 1_000,
            "budgetAmount": 10_000,
            "startsAt": (now - chrono::Duration::minutes(1)).to_rfc3339(),
            "endsAt": (now + chrono::Duration::days(1)).to_rfc3339(),
            "codes": codes,
            "flashSale": true,
        }))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    let id = view["id"].as_i64().unwrap();
    let key = shared::domain::campaign_key(id);
    for (i, code) in codes.iter().enumerate() {
        let (status, body) = app.reserve(code, i as i64 + 1, "o", 5_000).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    assert_eq!(
        in_flight(&app, &key).await,
        6,
        "one partition holds them all"
    );

    // Nothing has landed: the views count the uses in flight.
    let (_, c) = app.campaign(id).await;
    assert_eq!(
        (&c["usedCount"], &c["inFlightCount"], &c["budgetUsed"]),
        (&json!(6), &json!(6), &json!(0)),
        "{c}"
    );
    let (_, v) = app.get_voucher("KC-1").await;
    assert_eq!(
        (&v["usedCount"], &v["inFlightCount"]),
        (&json!(1), &json!(1))
    );
    // Read back, confirmed and released from the campaign's gate.
    let (status, r) = app.get_reservation("KC-1", "o").await;
    assert_eq!((status, &r["status"]), (StatusCode::OK, &json!("RESERVED")));
    assert_eq!(app.confirm("KC-2", "o").await.0, StatusCode::OK);
    assert_eq!(app.release("KC-3", "o").await.0, StatusCode::NO_CONTENT);
    // An order the intact gate never granted is unknown at once.
    assert_eq!(
        app.get_reservation("KC-4", "never").await.0,
        StatusCode::NOT_FOUND
    );

    // Redis restarts empty with four events in flight: the campaign waits for its partition.
    app.flush_gate().await;
    let (status, body) = app.warmup("KC-5").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        app.get_reservation("KC-6", "o").await.0,
        StatusCode::SERVICE_UNAVAILABLE,
        "KC-6's event may still be on its way"
    );
    let _consumer = app.start_kafka_consumer();
    wait_for(
        "the campaign's partition to drain",
        Duration::from_secs(30),
        async || in_flight(&app, &key).await == 0,
    )
    .await;
    wait_for(
        "the campaign to load again",
        Duration::from_secs(15),
        async || app.warmup("KC-5").await.0 == StatusCode::OK,
    )
    .await;
    // Five uses held (one released), counted once: the sixth code's use and the money of five.
    let gate = app.app.gate().counts(Unit::Campaign(id)).await.unwrap();
    assert_eq!(
        gate.map(|g| (g.remaining, g.budget)),
        Some((1, Some(5_000)))
    );
    let (_, c) = app.campaign(id).await;
    assert_eq!(
        (&c["usedCount"], &c["inFlightCount"], &c["budgetUsed"]),
        (&json!(5), &json!(0), &json!(5_000)),
        "{c}"
    );
    assert_eq!(
        app.get_reservation("KC-2", "o").await.1["status"],
        "CONFIRMED"
    );
    assert_eq!(
        app.reserve("KC-3", 9, "again", 5_000).await.0,
        StatusCode::CREATED
    );
}
