//! Consistency mode B against a real SQS endpoint (moto), real Redis and real Postgres: the
//! reserve path touches only Redis and SQS, the consumer merges events in any order, any number
//! of times, and reports failures per message.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::consumer::Consumed;
use shared::domain::ReserveOutcome;
use shared::events::sqs::handle_batch;
use shared::events::ReservedEvent;
use shared::gate::{Place, Unit};

use crate::harness::{assert_never_reserved, path, reserve_req, reserved_event, wait_for, TestApp};

/// Receives every message on the test's queue (deleting them), returning their bodies.
async fn drain(app: &TestApp) -> Vec<String> {
    let events = app.sqs();
    let mut bodies = Vec::new();
    let mut empty = 0;
    while empty < 2 {
        let got = events.receive(Duration::from_secs(0)).await.unwrap();
        if got.is_empty() {
            empty += 1;
            continue;
        }
        empty = 0;
        let handles: Vec<&str> = got.iter().map(|m| m.receipt_handle.as_str()).collect();
        events.delete(&handles).await.unwrap();
        bodies.extend(got.into_iter().map(|m| m.body));
    }
    bodies
}

fn batch(bodies: &[String]) -> SqsEvent {
    let mut event = SqsEvent::default();
    for (i, body) in bodies.iter().enumerate() {
        let mut m = SqsMessage::default();
        m.message_id = Some(format!("m{i}"));
        m.body = Some(body.clone());
        event.records.push(m);
    }
    event
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_events_shuffled_with_duplicates_land_once_each() {
    let app = Arc::new(
        TestApp::builder()
            .with_events(3)
            .configure(|s| s.events.poll = false)
            .spawn()
            .await,
    );
    app.voucher(
        "QUEUED",
        1000,
        json!({"flashSale": true, "perUserLimit": 10}),
    )
    .await;
    // The gate grants 1,000 uses; their events are what the reserve path would have sent.
    // (They are handed to the consumer directly: the local SQS server is one Python process
    // and takes over a minute to carry 1,000 messages; the queue's own delivery is covered by
    // the tests below.)
    let now = chrono::Utc::now().timestamp_millis();
    let mut bodies = Vec::new();
    for i in 0..1000 {
        let r = reserve_req("QUEUED", 1 + i % 300, &format!("o{i}"));
        let reply = app
            .app
            .gate()
            .reserve(
                &r.code,
                r.customer_id,
                r.order_id.as_str(),
                r.order_amount,
                now,
            )
            .await
            .unwrap();
        let (ReserveOutcome::Reserved, Some(held)) = (reply.outcome, reply.held) else {
            panic!("{reply:?}")
        };
        let event = ReservedEvent::new(&r, held, reply.rules_version, None);
        bodies.push(serde_json::to_string(&event).unwrap());
    }
    assert_eq!(
        app.counts("QUEUED").await.used_count,
        0,
        "nothing in Postgres yet"
    );
    assert_eq!(app.gate_remaining("QUEUED").await, Some(0));

    // The same event twice, in one batch.
    let twice = handle_batch(
        app.app.consumer(),
        None,
        batch(&[bodies[0].clone(), bodies[0].clone()]),
    )
    .await;
    assert!(twice.batch_item_failures.is_empty());
    // Then all of them, a third again, in a shuffled order.
    let again: Vec<String> = bodies.iter().step_by(3).cloned().collect();
    bodies.extend(again);
    let mut seed: u64 = 7;
    for i in (1..bodies.len()).rev() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        bodies.swap(i, (seed >> 33) as usize % (i + 1));
    }
    for chunk in bodies.chunks(10) {
        let response = handle_batch(app.app.consumer(), None, batch(chunk)).await;
        assert!(response.batch_item_failures.is_empty());
    }
    let counts = app.counts("QUEUED").await;
    assert_eq!(
        (
            counts.used_count,
            counts.active_rows,
            counts.customer_counter_sum
        ),
        (1000, 1000, 1000)
    );
    let rows: i64 = app
        .db
        .query_one("SELECT count(*) FROM redemption", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1000);
    let pending = app.gate_pending("QUEUED").await;
    assert_eq!(pending, 0, "every landed order left the pending set");
}

#[tokio::test]
async fn release_and_confirm_may_arrive_before_their_reserved_event() {
    let app = TestApp::builder()
        .with_events(3)
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    app.voucher("EARLY", 5, json!({"flashSale": true})).await;
    let (status, reserved_a) = app.reserve("EARLY", 1, "a", 111).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        app.reserve("EARLY", 1, "a", 111).await,
        (StatusCode::CREATED, reserved_a.clone()),
        "replay in mode B"
    );
    assert_eq!(
        app.reserve("EARLY", 2, "b", 222).await.0,
        StatusCode::CREATED
    );

    // Neither event has landed: the API answers from the gate and writes the row itself.
    assert_eq!(app.release("EARLY", "a").await.0, StatusCode::NO_CONTENT);
    let (status, body) = app.confirm("EARLY", "b").await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("CONFIRMED"))
    );
    assert_eq!(app.gate_remaining("EARLY").await, Some(4));
    let (status, _) = app.confirm("EARLY", "a").await;
    assert_eq!(status, StatusCode::CONFLICT);

    // The events land late (and twice): nothing changes.
    let bodies = drain(&app).await;
    assert!(bodies.len() >= 3, "{bodies:?}");
    for body in bodies.iter().chain(bodies.iter()) {
        let consumed = app.app.consumer().consume(body).await.unwrap();
        assert_eq!(consumed, Consumed::Unchanged, "{body}");
    }
    let counts = app.counts("EARLY").await;
    assert_eq!((counts.used_count, counts.active_rows), (1, 1));
    let (_, a) = app.get_reservation("EARLY", "a").await;
    let (_, b) = app.get_reservation("EARLY", "b").await;
    assert_eq!(
        (a["status"].as_str(), b["status"].as_str()),
        (Some("RELEASED"), Some("CONFIRMED"))
    );
    let first: Value = serde_json::from_str(&reserved_a).unwrap();
    assert_eq!(
        a["expiresAt"], first["expiresAt"],
        "the row keeps the gate's expiry"
    );
    // The amount travels in the event, which merged into nothing: the rows written ahead of it
    // took it from the gate.
    assert_eq!(order_amounts(&app, "EARLY").await, [111, 222]);
}

async fn order_amounts(app: &TestApp, code: &str) -> Vec<i64> {
    app.db
        .query(
            "SELECT order_amount FROM redemption WHERE voucher_code = $1 ORDER BY order_id",
            &[&code],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn a_poison_message_goes_to_the_dead_letter_queue_and_the_rest_lands() {
    let app = TestApp::builder().with_events(2).spawn().await;
    app.voucher("POISON", 5, json!({"flashSale": true})).await;
    let events = app.sqs();
    events
        .client()
        .await
        .send_message()
        .queue_url(events.queue_url())
        .message_body("{\"type\":\"voucher-reserved\",\"version\":1,\"code\":\"POISON\"")
        .send()
        .await
        .unwrap();
    for i in 1..=3 {
        assert_eq!(
            app.reserve("POISON", i, &format!("o{i}"), 10).await.0,
            StatusCode::CREATED
        );
    }
    wait_for("the events to land", Duration::from_secs(20), async || {
        app.counts("POISON").await.used_count == 3
    })
    .await;
    let dlq = app.dlq_url();
    wait_for(
        "the poison message in the DLQ",
        Duration::from_secs(30),
        async || {
            let attrs = events
                .client()
                .await
                .get_queue_attributes()
                .queue_url(dlq)
                .attribute_names(
                    aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages,
                )
                .send()
                .await
                .unwrap();
            attrs.attributes().and_then(|a| a.values().next().cloned()) == Some("1".to_owned())
        },
    )
    .await;
    assert_eq!(app.counts("POISON").await.active_rows, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_down_while_500_events_queue_up_then_all_land() {
    let app = Arc::new(
        TestApp::builder()
            .with_events(1000)
            .with_pg_proxy()
            .configure(|s| s.database.timeout = Duration::from_millis(500))
            .spawn()
            .await,
    );
    // 32 at a time: the local SQS stand-in is one Python process.
    postgres_down_while_500_events_queue_up(app, 32).await;
}

/// Mode B reserves 500 uses while Postgres is down (`app` has a Postgres proxy and consumes
/// its own events), `concurrency` at a time; once Postgres is back, all 500 land.
pub async fn postgres_down_while_500_events_queue_up(app: Arc<TestApp>, concurrency: usize) {
    app.voucher("PGOFF", 600, json!({"flashSale": true})).await;
    assert_eq!(
        app.reserve("PGOFF", 1, "warm", 10).await.0,
        StatusCode::CREATED
    );

    app.pg_proxy().set_up(false);
    let slots = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let tasks: Vec<_> = (2..502)
        .map(|i| {
            let (app, slots) = (app.clone(), slots.clone());
            tokio::spawn(async move {
                let _slot = slots.acquire().await.unwrap();
                app.reserve("PGOFF", i, &format!("o{i}"), 10).await
            })
        })
        .collect();
    for t in tasks {
        let (status, body) = t.await.unwrap();
        assert_eq!(
            status,
            StatusCode::CREATED,
            "mode B reserves without Postgres: {body}"
        );
    }
    assert_eq!(app.gate_remaining("PGOFF").await, Some(99));
    // A fixed wait on purpose: the outage goes on a while after the burst, so the poller's
    // deliveries fail and go back to the queue before Postgres returns.
    tokio::time::sleep(Duration::from_secs(2)).await;

    app.pg_proxy().set_up(true);
    wait_for(
        "500 queued events to land",
        Duration::from_secs(60),
        async || app.counts("PGOFF").await.used_count == 501,
    )
    .await;
    let counts = app.counts("PGOFF").await;
    assert_eq!(
        (counts.active_rows, counts.customer_counter_sum),
        (501, 501)
    );
    assert_eq!(app.view("PGOFF").await["remaining"], 99);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_emptied_with_events_in_flight_never_over_allocates_and_counts_revocations() {
    let app = Arc::new(
        TestApp::builder()
            .with_events(3)
            .configure(|s| s.events.poll = false)
            .spawn()
            .await,
    );
    app.voucher("LOST", 100, json!({"flashSale": true})).await;
    for i in 1..=100 {
        app.app
            .reservations()
            .reserve(&reserve_req("LOST", i, &format!("o{i}")))
            .await
            .unwrap();
    }
    let mut bodies = drain(&app).await;
    assert_eq!(bodies.len(), 100);
    // Half of the events land; then Redis restarts empty with the other half in flight.
    for body in bodies.drain(..50) {
        app.app.consumer().consume(&body).await.unwrap();
    }
    app.flush_gate().await;
    let events = app.sqs();
    for body in &bodies {
        events
            .client()
            .await
            .send_message()
            .queue_url(events.queue_url())
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    // Loading now would count those 50 twice: warm-up waits for them (503, Retry-After).
    let (status, body) = app.warmup("LOST").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("UNAVAILABLE"))
    );
    let (status, _) = app.reserve("LOST", 500, "late", 10).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    // Suppose it is loaded anyway (an operator forcing it): the gate offers 50 uses that the
    // queued events already hold, and hands them out again.
    assert_eq!(app.force_load("LOST").await, 50);
    for i in 201..=250 {
        app.app
            .reservations()
            .reserve(&reserve_req("LOST", i, &format!("n{i}")))
            .await
            .unwrap();
    }
    let rest = drain(&app).await;
    assert_eq!(rest.len(), 100);
    let mut revoked = 0;
    for body in &rest {
        if app.app.consumer().consume(body).await.unwrap() == Consumed::Revoked {
            revoked += 1;
        }
    }
    // Postgres held the line: never past 100, and every refusal is stored and counted.
    let counts = app.counts("LOST").await;
    assert_eq!((counts.used_count, counts.active_rows), (100, 100));
    assert_eq!(revoked, 50);
    let view = app.view("LOST").await;
    assert_eq!(
        (view["usedCount"].as_i64(), view["revokedCount"].as_i64()),
        (Some(100), Some(50))
    );
    let reasons: i64 = app
        .db
        .query_one(
            "SELECT count(*) FROM redemption WHERE status = 3 AND release_reason = 'REVOKED'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(reasons, 50);
    assert_eq!(
        app.gate_remaining("LOST").await,
        Some(0),
        "revoked uses do not return to the gate"
    );
}

/// `events` through the consumer in one batch: each one's outcome (`Applied`, ...) or, for
/// poison, its reason.
async fn consumed(app: &TestApp, events: &[&ReservedEvent]) -> Vec<String> {
    let bodies: Vec<String> = events.iter().map(|e| e.to_json()).collect();
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    app.app
        .consumer()
        .consume_all(&refs)
        .await
        .iter()
        .map(|a| match a {
            Ok(consumed) => format!("{consumed:?}"),
            Err(shared::consumer::ConsumeError::Poison(why)) => why.clone(),
            Err(e) => panic!("{e:?}"),
        })
        .collect()
}

/// The consumer lands a use only as the rules that granted it would have: each event is checked
/// against the voucher's version the gate stamped on it, the current one or one a change
/// superseded shortly before. A forged discount, an unknown version, a use while the voucher was
/// paused or outside its window, or under rules replaced long before it, never land, and name
/// their field. An event without a version (sent before events carried one) lands if rules in
/// force then would have granted it.
#[tokio::test]
async fn an_event_lands_only_as_the_rules_that_granted_it_would_have() {
    let app = TestApp::builder()
        .with_events(3)
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    app.voucher("GRANT", 10, json!({"flashSale": true, "perUserLimit": 5}))
        .await;
    let now = chrono::Utc::now().timestamp_millis();
    let granted = |customer: i64, order: &'static str| {
        let app = &app;
        async move {
            let r = reserve_req("GRANT", customer, order);
            let reply = app
                .app
                .gate()
                .reserve(&r.code, customer, order, r.order_amount, now)
                .await
                .unwrap();
            ReservedEvent::new(&r, reply.held.expect("granted"), reply.rules_version, None)
        }
    };
    // Version 1: 100,000 off, so 10 off an order of 10.
    let v1 = granted(1, "v1").await;
    assert_eq!((v1.rules_version, v1.discount_amount), (Some(1), 10));
    // Version 2: 3 off. The event granted under version 1 still lands with its 10.
    let (status, body) = app
        .patch_voucher("GRANT", json!({"discountAmount": 3}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v2 = granted(2, "v2").await;
    assert_eq!((v2.rules_version, v2.discount_amount), (Some(2), 3));

    let mut forged = v2.clone();
    forged.order_id = "forged".into();
    forged.discount_amount = 10;
    let mut unknown_version = v2.clone();
    unknown_version.order_id = "unknown-version".into();
    unknown_version.rules_version = Some(99);
    let mut outside = v2.clone();
    outside.order_id = "outside".into();
    outside.reserved_at_ms = now - 86_400_000;
    outside.expires_at_ms = outside.reserved_at_ms + 60_000;
    // Version 3: paused. A use stamped with it was never granted; one without a version was
    // granted by version 2, in force a moment ago.
    let (status, body) = app.patch_voucher("GRANT", json!({"active": false})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut paused = v2.clone();
    paused.order_id = "paused".into();
    paused.rules_version = Some(3);
    let mut unstamped = paused.clone();
    unstamped.order_id = "unstamped".into();
    unstamped.rules_version = None;

    let reasons = consumed(
        &app,
        &[
            &v1,
            &v2,
            &forged,
            &unknown_version,
            &outside,
            &paused,
            &unstamped,
        ],
    )
    .await;
    assert_eq!(&reasons[..2], ["Applied", "Applied"], "{reasons:?}");
    assert_eq!(reasons[6], "Applied", "{reasons:?}");
    for (reason, field) in
        reasons[2..6]
            .iter()
            .zip(["discountAmount", "rulesVersion", "reservedAtMs", "paused"])
    {
        assert!(reason.contains(field), "{reason} should name {field}");
    }

    // Rules replaced an hour ago cannot grant a use made now: a forged event cannot pick the
    // older, looser version (here 10 off where the rules now give 3).
    app.db
        .execute(
            "UPDATE voucher_rules SET superseded_at = now() - interval '1 hour'
              WHERE voucher_code = 'GRANT' AND version = 1",
            &[],
        )
        .await
        .unwrap();
    let mut stale = v1.clone();
    stale.order_id = "stale".into();
    stale.customer_id = 3;
    let answer = app.app.consumer().consume(&stale.to_json()).await;
    match answer {
        Err(shared::consumer::ConsumeError::Poison(why)) => {
            assert!(why.contains("were replaced"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    let rows: Vec<(String, i64)> = app
        .db
        .query(
            "SELECT order_id, discount_amount FROM redemption ORDER BY order_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("unstamped".to_owned(), 3),
            ("v1".to_owned(), 10),
            ("v2".to_owned(), 3)
        ]
    );
}

/// A flash-sale campaign's code's event is checked against its campaign's rules at the
/// campaign's version its gate stamped (`campaign_rules` keeps those a change replaced), and
/// must name the code's own campaign: one naming none or another is poison, with its reason.
#[tokio::test]
async fn a_campaign_codes_event_lands_only_under_its_campaigns_rules_and_name() {
    let app = TestApp::builder()
        .with_events(3)
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    let now = chrono::Utc::now();
    let (status, view) = app
        .create_campaign(json!({
            "discountAmount": 10,
            "startsAt": (now - chrono::Duration::minutes(1)).to_rfc3339(),
            "endsAt": (now + chrono::Duration::days(1)).to_rfc3339(),
            "codes": ["EC-1", "EC-2", "EC-3", "EC-4", "EC-5"],
            "flashSale": true,
        }))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    let id = view["id"].as_i64().unwrap();
    let r = reserve_req("EC-1", 1, "v1");
    let reply = app
        .app
        .gate()
        .reserve(
            Place::in_campaign(id, &r.code),
            1,
            "v1",
            r.order_amount,
            now.timestamp_millis(),
        )
        .await
        .unwrap();
    let v1 = ReservedEvent::new(
        &r,
        reply.held.expect("granted"),
        reply.rules_version,
        Some(id),
    );
    assert_eq!((v1.rules_version, v1.discount_amount), (Some(1), 10));
    // Version 2: paused.
    let (status, body) = app.patch_campaign(id, json!({"active": false})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let other = |code: &str, customer: i64, order: &str| {
        let mut e = v1.clone();
        e.code = code.into();
        e.customer_id = customer;
        e.order_id = order.into();
        e
    };
    let mut paused = other("EC-2", 2, "paused");
    paused.rules_version = Some(2);
    let mut unknown_version = other("EC-3", 3, "unknown-version");
    unknown_version.rules_version = Some(99);
    let mut no_campaign = other("EC-3", 3, "no-campaign");
    no_campaign.campaign_id = None;
    let mut another_campaign = other("EC-3", 3, "another-campaign");
    another_campaign.campaign_id = Some(id + 1_000);
    // Without a version: version 1, in force a moment ago, granted it.
    let mut unstamped = other("EC-4", 4, "unstamped");
    unstamped.rules_version = None;

    let reasons = consumed(
        &app,
        &[
            &v1,
            &paused,
            &unknown_version,
            &no_campaign,
            &another_campaign,
            &unstamped,
        ],
    )
    .await;
    assert_eq!(
        (reasons[0].as_str(), reasons[5].as_str()),
        ("Applied", "Applied"),
        "{reasons:?}"
    );
    for (reason, field) in
        reasons[1..5]
            .iter()
            .zip(["paused", "rulesVersion", "campaignId", "campaignId"])
    {
        assert!(reason.contains(field), "{reason} should name {field}");
    }
    let rows: Vec<(String, String)> = app
        .db
        .query(
            "SELECT voucher_code, order_id FROM redemption ORDER BY order_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("EC-4".to_owned(), "unstamped".to_owned()),
            ("EC-1".to_owned(), "v1".to_owned())
        ]
    );
    // The landed use is no longer pending in the campaign's gate.
    assert_eq!(
        app.app.gate().pending(Unit::Campaign(id)).await.unwrap().1,
        0
    );
}

/// Code deployed before `migrate` created the rules' history (docs/DEPLOY.md: a release that
/// uses its own migration at once) keeps landing events, unchecked as before, and keeps
/// sweeping, instead of failing every batch until migrate runs.
#[tokio::test]
async fn events_land_unchecked_and_sweeps_run_until_migrate_creates_the_rules_history() {
    let app = TestApp::builder()
        .with_events(3)
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    app.voucher("EARLYDEPLOY", 5, json!({"flashSale": true}))
        .await;
    app.db
        .batch_execute("DROP TABLE voucher_rules")
        .await
        .unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let event = reserved_event("EARLYDEPLOY", 1, "o1", now);
    let answer = app.app.consumer().consume(&event.to_json()).await;
    assert_eq!(answer.unwrap(), Consumed::Applied);
    assert_eq!(app.counts("EARLYDEPLOY").await.used_count, 1);
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.rules_forgotten, 0);
}

/// One batch, one transaction: a message Postgres rejects (its voucher does not exist) fails
/// alone, one it must revoke is stored REVOKED, and the rest land.
#[tokio::test]
async fn a_batch_lands_together_and_a_message_postgres_rejects_fails_alone() {
    let app = TestApp::spawn().await;
    app.voucher("BATCH", 2, json!({"flashSale": true, "counterSlots": 2}))
        .await;
    let now = chrono::Utc::now().timestamp_millis();
    let event = |code: &str, customer: i64, order: &str| {
        let held = shared::domain::Held {
            customer_id: customer,
            reserved_ms: now,
            expires_ms: now + 60_000,
            discount: 10,
        };
        serde_json::to_string(&ReservedEvent::new(
            &reserve_req(code, customer, order),
            held,
            None,
            None,
        ))
        .unwrap()
    };
    let bodies = vec![
        event("BATCH", 1, "a"),
        event("NOSUCH", 2, "b"),
        event("BATCH", 3, "c"),
        event("BATCH", 1, "a"),
        event("BATCH", 4, "d"),
    ];
    let mut sqs = batch(&bodies);
    for (i, m) in sqs.records.iter_mut().enumerate() {
        m.message_id = Some(format!("m{i}"));
    }
    let response = handle_batch(app.app.consumer(), None, sqs).await;
    let failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, vec!["m1"], "only the unknown voucher's event fails");
    let counts = app.counts("BATCH").await;
    assert_eq!((counts.used_count, counts.active_rows), (2, 2));
    let statuses: Vec<(String, i16, Option<String>)> = app
        .db
        .query(
            "SELECT order_id, status, release_reason FROM redemption ORDER BY order_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    // Events merge in (code, orderId) order: a and c take the two uses, d is revoked.
    assert_eq!(
        statuses,
        vec![
            ("a".to_owned(), 1, None),
            ("c".to_owned(), 1, None),
            ("d".to_owned(), 3, Some("REVOKED".to_owned())),
        ]
    );
    assert_eq!(app.view("BATCH").await["revokedCount"], 1);
}

/// The consumer merges a batch of hundreds of events in one call, in two pieces at once: the
/// set-based path takes a piece in one transaction, and when it falls back to the loop (here an
/// order twice in the batch), the loop runs it 64 changes at a time. Either way every event
/// gets its own answer: 300 orders take the 300 uses, the other 100 are revoked, the order sent
/// twice lands once, and the counters agree with the rows.
#[tokio::test]
async fn a_batch_longer_than_the_loops_chunk_lands_on_either_path_with_an_answer_each() {
    let app = TestApp::spawn().await;
    let now = chrono::Utc::now().timestamp_millis();
    for (code, twice) in [("LONGSET", false), ("LONGLOOP", true)] {
        app.voucher(code, 300, json!({"flashSale": true, "counterSlots": 4}))
            .await;
        let events: Vec<ReservedEvent> = (1..=400)
            .map(|i| {
                let held = shared::domain::Held {
                    customer_id: i,
                    reserved_ms: now,
                    expires_ms: now + 60_000,
                    discount: 10,
                };
                ReservedEvent::new(&reserve_req(code, i, &format!("o{i:03}")), held, None, None)
            })
            .collect();
        let mut batch: Vec<&ReservedEvent> = events.iter().collect();
        if twice {
            batch.push(&events[0]);
        }
        let answers = consumed(&app, &batch).await;
        let count = |what: &str| answers.iter().filter(|a| *a == what).count();
        assert_eq!(
            (count("Applied"), count("Revoked"), count("Unchanged")),
            (300, 100, usize::from(twice)),
            "{code}"
        );
        // Each answer is its own event's: what its row says.
        let rows: std::collections::HashMap<String, i16> = app
            .db
            .query(
                "SELECT order_id, status FROM redemption WHERE voucher_code = $1",
                &[&code],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        for (event, answer) in batch.iter().zip(&answers).take(400) {
            let want = if rows[&event.order_id] == 1 {
                "Applied"
            } else {
                "Revoked"
            };
            assert_eq!(answer, want, "{code} {}", event.order_id);
        }
        let counts = app.counts(code).await;
        assert_eq!(
            (
                counts.used_count,
                counts.active_rows,
                counts.customer_counter_sum
            ),
            (300, 300, 300),
            "{code}"
        );
        assert_eq!(app.view(code).await["revokedCount"], 100, "{code}");
    }
}

/// After Redis lost its data, an order answered 201 whose event has not landed is in neither
/// the gate nor Postgres. Its confirm (and release) answers 503, retry, while events are on the
/// queue, never 404; once the event has landed it confirms. The chaos run found the 404.
#[tokio::test]
async fn a_confirm_after_redis_lost_its_data_waits_for_the_event_instead_of_404() {
    let app = TestApp::builder()
        .with_events(3)
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    app.voucher("LOSS", 5, json!({"flashSale": true})).await;
    assert_eq!(
        app.reserve("LOSS", 1, "a", 111).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        app.reserve("LOSS", 2, "b", 111).await.0,
        StatusCode::CREATED
    );
    app.flush_gate().await;

    let (status, body) = app.confirm("LOSS", "a").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let (status, body) = app.release("LOSS", "b").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");

    for body in drain(&app).await {
        app.app.consumer().consume(&body).await.unwrap();
    }
    let (status, body) = app.confirm("LOSS", "a").await;
    assert_eq!(
        (status, &body["status"]),
        (StatusCode::OK, &json!("CONFIRMED"))
    );
    let (status, _) = app.release("LOSS", "b").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // With the queue drained, an order nobody reserved is not found.
    let (status, _) = app.confirm("LOSS", "never").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Read your writes in mode B: a reservation reads back as its 201 said at once, from the gate,
/// while its event is still on the queue, and the same once it has landed. The contract tests
/// waited for events to land before reading, which hid the 404 this used to answer.
#[tokio::test]
async fn a_reservation_reads_back_at_once_while_its_event_is_on_the_queue() {
    let app = TestApp::builder()
        .with_events(3)
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    app.voucher("READBACK", 5, json!({"flashSale": true})).await;
    let (status, reserved) = app.reserve("READBACK", 1, "a", 111).await;
    assert_eq!(status, StatusCode::CREATED);
    let reserved: Value = serde_json::from_str(&reserved).unwrap();
    assert_eq!(
        app.counts("READBACK").await.active_rows,
        0,
        "nothing landed"
    );

    assert_eq!(
        app.get_reservation("READBACK", "a").await,
        (StatusCode::OK, reserved.clone())
    );
    // The gate holds every order it granted: one it does not know never existed, and says so
    // at once although an event is in flight (this used to answer 503).
    assert_never_reserved(&app, "READBACK", "never").await;

    for body in drain(&app).await {
        app.app.consumer().consume(&body).await.unwrap();
    }
    assert_eq!(app.counts("READBACK").await.active_rows, 1, "landed");
    assert_eq!(
        app.get_reservation("READBACK", "a").await,
        (StatusCode::OK, reserved)
    );
}

/// After a failover the gate may lack the last grants, whose events are still on the queue:
/// an order it does not know is answered 503 with Retry-After, never 404, until the events have
/// landed and one send timeout has passed (a grant made just before the failover may still be
/// in its send); then the gate is trusted again, and 404 comes at once, events in flight or not.
#[tokio::test]
async fn after_a_failover_unknown_orders_wait_for_the_events_then_the_gate_is_trusted_again() {
    let send_timeout = Duration::from_secs(2);
    let app = TestApp::builder()
        .with_events(3)
        .configure(move |s| {
            s.events.poll = false;
            s.events.timeout = send_timeout;
        })
        .spawn()
        .await;
    app.voucher("FAILOVER", 5, json!({"flashSale": true})).await;
    let (status, reserved) = app.reserve("FAILOVER", 1, "a", 111).await;
    assert_eq!(status, StatusCode::CREATED);
    let reserved: Value = serde_json::from_str(&reserved).unwrap();
    let loaded_into = app.gate_meta("FAILOVER", "replid").await.expect("recorded");
    app.pretend_failover("FAILOVER").await;
    // Say the failover lost order "lost"'s grant: its event would be on the queue (order "a"'s
    // is), and the gate forgot it.
    let noticed = Instant::now();
    for read in [
        app.get_reservation("FAILOVER", "lost").await,
        app.confirm("FAILOVER", "lost").await,
        app.release("FAILOVER", "lost").await,
    ] {
        assert_eq!(read.0, StatusCode::SERVICE_UNAVAILABLE, "{}", read.1);
    }
    let raw = app
        .http
        .get(app.url(&path::reservation("FAILOVER", "lost")))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(raw.headers()["retry-after"], "1");
    // What the gate holds still reads back.
    assert_eq!(
        app.get_reservation("FAILOVER", "a").await,
        (StatusCode::OK, reserved)
    );

    for body in drain(&app).await {
        app.app.consumer().consume(&body).await.unwrap();
    }
    // Nothing in flight, but the failover was noticed less than a send timeout ago.
    assert!(noticed.elapsed() < send_timeout);
    assert_eq!(
        app.confirm("FAILOVER", "lost").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    tokio::time::sleep(send_timeout.saturating_sub(noticed.elapsed()) + Duration::from_millis(100))
        .await;
    assert_never_reserved(&app, "FAILOVER", "lost").await;
    assert_eq!(
        app.gate_meta("FAILOVER", "replid").await.as_deref(),
        Some(loaded_into.as_str()),
        "trusted again on the node serving now"
    );
    // Trusted: with an event in flight again, an unknown order is 404 at once.
    assert_eq!(
        app.reserve("FAILOVER", 2, "b", 111).await.0,
        StatusCode::CREATED
    );
    assert_never_reserved(&app, "FAILOVER", "other").await;
}

/// A use whose TTL passed before its event landed comes back at TTL plus one sweep, in the gate
/// and in Postgres, as in mode A; the late event then changes nothing.
#[tokio::test]
async fn a_use_expired_before_its_event_landed_comes_back_at_the_next_sweep() {
    let app = TestApp::builder()
        .with_events(3)
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    app.voucher(
        "SHORT",
        1,
        json!({"flashSale": true, "reservationTtlSeconds": 1}),
    )
    .await;
    assert_eq!(
        app.reserve("SHORT", 1, "a", 111).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        app.reserve("SHORT", 2, "b", 111).await.0,
        StatusCode::CONFLICT
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;

    app.app.sweeper().sweep().await.unwrap();
    assert_eq!(
        app.gate_remaining("SHORT").await,
        Some(1),
        "back in the gate"
    );
    let (status, r) = app.get_reservation("SHORT", "a").await;
    assert_eq!((status, &r["status"]), (StatusCode::OK, &json!("RELEASED")));
    assert_eq!(app.view("SHORT").await["usedCount"], 0, "and in Postgres");

    for body in drain(&app).await {
        app.app.consumer().consume(&body).await.unwrap();
    }
    assert_eq!(
        app.counts("SHORT").await.active_rows,
        0,
        "the late event changed nothing"
    );
    assert_eq!(
        app.reserve("SHORT", 2, "b", 111).await.0,
        StatusCode::CREATED
    );
}

/// While one sale's events wait on the queue, a second flash voucher (the gate never held it,
/// so none of its events can be on the way) loads at creation and grants its first reserve at
/// once. The warm-up used to wait for the whole queue to drain and answer 503 "loading".
#[tokio::test]
async fn a_new_voucher_loads_and_grants_at_once_while_another_sales_events_are_queued() {
    let app = TestApp::builder()
        .with_events(3)
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    app.voucher("SALE", 5, json!({"flashSale": true})).await;
    for i in 1..=3 {
        assert_eq!(
            app.reserve("SALE", i, &format!("o{i}"), 111).await.0,
            StatusCode::CREATED
        );
    }
    app.voucher("NEXT", 5, json!({"flashSale": true})).await;
    assert_eq!(
        app.gate_remaining("NEXT").await,
        Some(5),
        "loaded at creation"
    );
    let started = Instant::now();
    assert_eq!(
        app.reserve("NEXT", 1, "n1", 111).await.0,
        StatusCode::CREATED
    );
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        drain(&app).await.len(),
        4,
        "the events were queued all along"
    );
}

/// A flash voucher whose gate lost its data, refused by its rules alone, is answered 422 from
/// Postgres without being loaded. Loading it again waits in mode B until the events in flight
/// have landed (on SQS, the whole queue: the voucher's own count went with the gate), so while
/// another voucher's sale kept events on the queue, these answered 503 "loading".
#[tokio::test]
async fn refusals_by_the_rules_need_no_loading_while_another_sales_events_are_queued() {
    let app = TestApp::builder()
        .with_events(3)
        .configure(|s| s.events.poll = false)
        .spawn()
        .await;
    app.voucher("RUNNING", 5, json!({"flashSale": true})).await;
    assert_eq!(
        app.reserve("RUNNING", 1, "a", 111).await.0,
        StatusCode::CREATED
    );
    // The event stays on the queue: nothing consumes.
    let now = chrono::Utc::now();
    let at = |minutes: i64| (now + chrono::Duration::minutes(minutes)).to_rfc3339();
    app.voucher(
        "LATER",
        5,
        json!({"flashSale": true, "startsAt": at(60), "endsAt": at(120)}),
    )
    .await;
    app.voucher(
        "OVER",
        5,
        json!({"flashSale": true, "startsAt": at(-120), "endsAt": at(-60)}),
    )
    .await;
    app.voucher("PAUSED", 5, json!({"flashSale": true, "active": false}))
        .await;
    app.voucher(
        "MINIMUM",
        5,
        json!({"flashSale": true, "minOrderAmount": 500}),
    )
    .await;
    // Redis restarts empty: the vouchers loaded at creation may have lost grants.
    app.flush_gate().await;
    for (code, reason) in [
        ("LATER", "NOT_STARTED"),
        ("OVER", "EXPIRED"),
        ("PAUSED", "INACTIVE"),
        ("MINIMUM", "MIN_ORDER_AMOUNT"),
    ] {
        let (status, body) = app.reserve(code, 2, "b", 111).await;
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (status, &body["error"], &body["reason"]),
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!("NOT_ELIGIBLE"),
                &json!(reason)
            ),
            "{code}: {body}"
        );
    }
    // Not loaded by any of it, but LATER: it starts after the warm-up lead, so it was not loaded
    // at creation, no event of it can be on the way, and it loaded at once.
    for code in ["OVER", "PAUSED", "MINIMUM"] {
        assert_eq!(app.gate_remaining(code).await, None, "{code}");
    }
    assert_eq!(app.gate_remaining("LATER").await, Some(5));
}

/// An event that can never land (a field out of range, refused at parse; an expiry past the
/// voucher's TTL, or a forged discount, refused by the rules' check) goes to the dead-letter
/// queue at once with its reason,
/// and the good events around it land within seconds. The queue would move a failing message
/// only after 1,000 receives: what reaches the dead-letter queue, the consumer sent there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_event_that_can_never_land_goes_to_the_dead_letter_queue_at_once_with_its_reason() {
    let app = TestApp::builder().with_events(1000).spawn().await;
    app.voucher("DEAD", 10, json!({"flashSale": true, "perUserLimit": 5}))
        .await;
    let now = chrono::Utc::now().timestamp_millis();
    let event = |customer: i64, order: &str| reserved_event("DEAD", customer, order, now);
    let mut no_customer = event(1, "bad-customer");
    no_customer.customer_id = 0;
    let mut held_for_days = event(2, "bad-ttl");
    held_for_days.expires_at_ms = now + 10 * 86_400_000;
    let mut forged = event(4, "bad-discount");
    forged.discount_amount = 9;
    let events = app.sqs();
    let started = Instant::now();
    for e in [
        event(1, "g1"),
        no_customer,
        event(2, "g2"),
        held_for_days,
        event(3, "g3"),
        forged,
    ] {
        events
            .client()
            .await
            .send_message()
            .queue_url(events.queue_url())
            .message_body(e.to_json())
            .send()
            .await
            .unwrap();
    }
    wait_for(
        "the good events to land",
        Duration::from_secs(20),
        async || app.counts("DEAD").await.active_rows == 3,
    )
    .await;
    let mut reasons: Vec<String> = Vec::new();
    wait_for(
        "the three bad events in the dead-letter queue",
        Duration::from_secs(20),
        async || {
            let out = events
                .client()
                .await
                .receive_message()
                .queue_url(app.dlq_url())
                .max_number_of_messages(10)
                .message_attribute_names("All")
                .send()
                .await
                .unwrap();
            for m in out.messages() {
                let reason = m
                    .message_attributes()
                    .and_then(|a| a.get("error"))
                    .and_then(|v| v.string_value())
                    .unwrap_or_default();
                reasons.push(reason.to_owned());
            }
            reasons.len() >= 3
        },
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons.iter().any(|r| r.contains("customerId")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("reservation TTL")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("discountAmount")),
        "{reasons:?}"
    );
    assert_eq!(app.counts("DEAD").await.used_count, 3);
}
