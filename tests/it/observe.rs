//! What operators watch during a sale: `flashgate serve`'s `/metrics` counts exactly the
//! requests it answered, and the console page shows the sale in a real browser. Both run the
//! real binary as a process of its own ([`ServerProcess`]): a process has one metrics recorder.

use std::time::{Duration, Instant};

use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::{sample, unique_name, ServerProcess, TestApp};

const RESERVE: &str = "POST /vouchers/{code}/reservations";

fn voucher_body(code: &str, total_limit: i64) -> Value {
    let now = chrono::Utc::now();
    json!({
        "code": code,
        "discountAmount": 100_000,
        "totalLimit": total_limit,
        "startsAt": (now - chrono::Duration::minutes(5)).to_rfc3339(),
        "endsAt": (now + chrono::Duration::days(1)).to_rfc3339(),
        "flashSale": true,
    })
}

async fn create(client: &reqwest::Client, url: &str, code: &str, total_limit: i64) {
    let response = client
        .post(format!("{url}/vouchers"))
        .json(&voucher_body(code, total_limit))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
}

/// A reserve's status and the `code` of its error body (`RESERVED` for a 201).
async fn reserve(client: &reqwest::Client, url: &str, code: &str, customer: i64) -> String {
    let response = client
        .post(format!("{url}/vouchers/{code}/reservations"))
        .json(&json!({"customerId": customer, "orderId": format!("order-{customer}"), "orderAmount": 200_000}))
        .send()
        .await
        .unwrap();
    if response.status() == StatusCode::CREATED {
        return "RESERVED".to_owned();
    }
    let body: Value = response.json().await.unwrap();
    body["error"].as_str().unwrap().to_owned()
}

/// Guessed codes show on `/metrics`: the first reserve of a code that does not exist asks
/// Postgres, the next ones within the cache's age are answered from memory and counted.
#[tokio::test]
async fn metrics_count_unknown_codes_answered_from_memory() {
    let server = ServerProcess::start(&[
        ("SWEEP_INTERVAL_SECONDS", "0"),
        ("UNKNOWN_CODE_CACHE_MS", "60000"),
    ])
    .await;
    let client = reqwest::Client::new();
    let url = &server.url;
    for customer in 1..=4 {
        assert_eq!(
            reserve(&client, url, "GUESSED", customer).await,
            "VOUCHER_NOT_FOUND"
        );
    }
    let text = server.metrics(&client).await;
    assert_eq!(
        sample(&text, "flashgate_unknown_code_answers_total", &[]),
        3.0,
        "{text}"
    );
}

#[tokio::test]
async fn metrics_count_every_request_by_route_and_outcome() {
    let server = ServerProcess::start(&[("SWEEP_INTERVAL_SECONDS", "0")]).await;
    let client = reqwest::Client::new();
    let url = &server.url;
    let code = unique_name("M").to_uppercase()[..20].to_owned();
    create(&client, url, &code, 50).await;

    // 120 customers for 50 uses, then 10 winners' retries (replays: RESERVED again), 5 bodies
    // that are not reserves, and a path that is no route.
    let answers = join_all((1..=120).map(|c| reserve(&client, url, &code, c))).await;
    let won: Vec<i64> = (1..=120)
        .zip(&answers)
        .filter(|(_, a)| *a == "RESERVED")
        .map(|(c, _)| c)
        .collect();
    assert_eq!(won.len(), 50, "{answers:?}");
    assert_eq!(answers.iter().filter(|a| *a == "OUT_OF_STOCK").count(), 70);
    for c in &won[..10] {
        assert_eq!(reserve(&client, url, &code, *c).await, "RESERVED");
    }
    for _ in 0..5 {
        let response = client
            .post(format!("{url}/vouchers/{code}/reservations"))
            .json(&json!({"customerId": "not a number"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }
    let nowhere = client.get(format!("{url}/nowhere")).send().await.unwrap();
    assert_eq!(nowhere.status(), StatusCode::NOT_FOUND);

    let text = server.metrics(&client).await;
    let count = |route: &str, outcome: &str| {
        sample(
            &text,
            "flashgate_requests_total",
            &[("route", route), ("outcome", outcome)],
        )
    };
    assert_eq!(count(RESERVE, "RESERVED"), 60.0, "{text}");
    assert_eq!(count(RESERVE, "OUT_OF_STOCK"), 70.0);
    assert_eq!(count(RESERVE, "INVALID_REQUEST"), 5.0);
    assert_eq!(count("POST /vouchers", "CREATED"), 1.0);
    assert_eq!(count("unmatched", "NOT_FOUND"), 1.0);
    // Every reserve is in the latency histogram, each within its +Inf bucket.
    let reserves = sample(
        &text,
        "flashgate_request_duration_seconds_count",
        &[("route", RESERVE)],
    );
    assert_eq!(reserves, 135.0);
    let under_inf = sample(
        &text,
        "flashgate_request_duration_seconds_bucket",
        &[("route", RESERVE), ("le", "+Inf")],
    );
    assert_eq!(under_inf, 135.0);
    // The gate ran a reserve script per new order (the sold-out short cut may answer the
    // latest losers with a lookup instead), and the winners' Postgres writes were batched: the
    // 50 winners. The 10 retries came after their rows landed: each was answered from its row
    // (one read), not merged again through group commit.
    let scripts = sample(
        &text,
        "flashgate_dependency_duration_seconds_count",
        &[("dependency", "gate"), ("call", "reserve")],
    );
    let short_cut = sample(&text, "flashgate_sold_out_answers_total", &[]);
    assert!(scripts >= 50.0 && scripts + short_cut >= 130.0, "{text}");
    let merged = sample(
        &text,
        "flashgate_group_commit_batch_size_sum",
        &[("writer", "flash")],
    );
    assert_eq!(merged, 50.0, "{text}");
    let reads = sample(
        &text,
        "flashgate_dependency_duration_seconds_count",
        &[("dependency", "postgres"), ("call", "reservation")],
    );
    assert_eq!(reads, 10.0, "{text}");

    // The scrape itself is counted by the next one.
    let again = server.metrics(&client).await;
    assert!(
        sample(
            &again,
            "flashgate_requests_total",
            &[("route", "GET /metrics"), ("outcome", "METRICS")]
        ) >= 1.0
    );
}

#[tokio::test]
async fn every_answer_carries_its_request_id() {
    let app = TestApp::spawn().await;
    let id_of = |response: &reqwest::Response| {
        response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    // The client's id comes back as sent, on a success and on an error alike.
    for path in ["/health/live", "/vouchers/NOPE"] {
        let response = app
            .http
            .get(format!("{}{path}", app.base))
            .header("x-request-id", "checkout-7f3a")
            .send()
            .await
            .unwrap();
        assert_eq!(id_of(&response), "checkout-7f3a", "{path}");
    }
    // Without one (or with one too long to be an id), each request gets its own.
    let mut ids = Vec::new();
    for sent in [None, Some("x".repeat(200))] {
        let mut request = app.http.get(format!("{}/health/live", app.base));
        if let Some(sent) = sent {
            request = request.header("x-request-id", sent);
        }
        let id = id_of(&request.send().await.unwrap());
        assert!(
            id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{id}"
        );
        ids.push(id);
    }
    assert_ne!(ids[0], ids[1]);
}

#[tokio::test]
async fn metrics_want_the_operator_token_where_tokens_are_set() {
    let server = ServerProcess::start(&[
        ("SWEEP_INTERVAL_SECONDS", "0"),
        ("ORDER_SERVICE_TOKEN", "order-token"),
        ("OPERATOR_TOKEN", "operator-token"),
    ])
    .await;
    let client = reqwest::Client::new();
    let get = |token: Option<&'static str>| {
        let mut request = client.get(format!("{}/metrics", server.url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.unwrap().status() }
    };
    assert_eq!(get(None).await, StatusCode::UNAUTHORIZED);
    assert_eq!(get(Some("order-token")).await, StatusCode::FORBIDDEN);
    assert_eq!(get(Some("operator-token")).await, StatusCode::OK);
    // The page itself holds no data: it asks for the token and sends it with its reads.
    let console = client
        .get(format!("{}/console", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(console.status(), StatusCode::OK);
}

/// chromedriver, from `CHROMEDRIVER` or the PATH (`scripts/services.sh browser` installs
/// Debian's `chromium-driver`).
fn chromedriver() -> String {
    std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".to_owned())
}

/// Where the console's screenshot is kept: under the Cargo target directory, a CI artifact.
fn screenshot_path() -> std::path::PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("console").join("console.png")
}

#[tokio::test]
async fn the_console_shows_a_sale_as_it_happens() {
    let server = ServerProcess::start(&[("SWEEP_INTERVAL_SECONDS", "0")]).await;
    let client = reqwest::Client::new();
    let url = server.url.clone();
    let code = unique_name("C").to_uppercase()[..20].to_owned();
    const LIMIT: i64 = 300;
    create(&client, &url, &code, LIMIT).await;

    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut driver = tokio::process::Command::new(chromedriver())
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver (Debian's chromium-driver; scripts/services.sh browser installs it)");
    let caps: serde_json::Map<String, Value> = serde_json::from_value(json!({
        "goog:chromeOptions": {
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1280,1000"]
        }
    }))
    .unwrap();
    let browser = {
        let started = Instant::now();
        loop {
            let http = hyper_util::client::legacy::connect::HttpConnector::new();
            match fantoccini::ClientBuilder::new(http)
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(browser) => break browser,
                Err(e) if started.elapsed() < Duration::from_secs(30) => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("no browser session from chromedriver: {e}"),
            }
        }
    };

    browser
        .goto(&format!("{url}/console#voucher={code}"))
        .await
        .unwrap();
    let text = |id: &'static str| {
        let browser = browser.clone();
        async move {
            match browser.find(fantoccini::Locator::Id(id)).await {
                Ok(e) => e.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            }
        }
    };
    let wait_text = |id: &'static str, want: String| {
        let text = &text;
        async move {
            let started = Instant::now();
            loop {
                let got = text(id).await;
                if got == want {
                    return;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "#{id} shows {got:?}, not {want:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    wait_text("remaining", LIMIT.to_string()).await;

    // The sale: 600 customers for 300 uses, 60 at a time, while the page is read as it polls.
    let sale = {
        let (client, url, code) = (client.clone(), url.clone(), code.clone());
        tokio::spawn(async move {
            for wave in 0..10 {
                let customers = (wave * 60 + 1)..=(wave * 60 + 60);
                join_all(customers.map(|c| reserve(&client, &url, &code, c))).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    let mut seen = Vec::new();
    while !sale.is_finished() {
        if let Ok(n) = text("remaining").await.parse::<i64>() {
            if seen.last() != Some(&n) {
                seen.push(n);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sale.await.unwrap();
    wait_text("remaining", "0".to_owned()).await;

    // The page's outcome counts are the server's, once its next poll has read them.
    let metrics = server.metrics(&client).await;
    let served = |outcome: &str| {
        sample(
            &metrics,
            "flashgate_requests_total",
            &[("route", RESERVE), ("outcome", outcome)],
        ) as i64
    };
    assert_eq!(served("RESERVED"), LIMIT);
    assert_eq!(served("OUT_OF_STOCK"), 600 - LIMIT);
    wait_text("outcome-RESERVED", LIMIT.to_string()).await;
    wait_text("outcome-OUT_OF_STOCK", (600 - LIMIT).to_string()).await;
    wait_text("outcome-total", "600".to_owned()).await;
    assert_eq!(text("state").await, "active");
    // The list's row of the voucher agrees with its card. The page redraws the list on every
    // poll, so a row found a moment ago may be gone when its text is read: read it again.
    let row_selector = format!("tr[data-code=\"{code}\"]");
    let mut row = String::new();
    for _ in 0..50 {
        if let Ok(found) = browser.find(fantoccini::Locator::Css(&row_selector)).await {
            row = found.text().await.unwrap_or_default();
        }
        if row.contains("300 / 300") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(row.contains("300 / 300"), "the list shows {row:?}");
    // Remaining went down while the sale ran, not only from the limit to 0 at the end.
    assert!(
        seen.first() == Some(&LIMIT) && seen.iter().any(|n| *n > 0 && *n < LIMIT),
        "remaining as the page showed it: {seen:?}"
    );

    let png = browser.screenshot().await.unwrap();
    let path = screenshot_path();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, png).unwrap();
    eprintln!(
        "console screenshot: {} (remaining seen: {seen:?})",
        path.display()
    );

    // Pausing from the page goes through the API.
    browser
        .find(fantoccini::Locator::Id("toggle"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text("state", "paused".to_owned()).await;
    let view: Value = client
        .get(format!("{url}/vouchers/{code}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(view["active"], false);

    // An order of several codes: each code's reservation row names the order's codes.
    let (first, second) = (format!("{code}-A"), format!("{code}-B"));
    create(&client, &url, &first, 10).await;
    create(&client, &url, &second, 10).await;
    let response = client
        .post(format!("{url}/orders/multi-1/reservations"))
        .json(&json!({"customerId": 9, "orderAmount": 500_000, "codes": [first, second]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    browser
        .goto(&format!("{url}/console#voucher={second}"))
        .await
        .unwrap();
    let want = format!("multi-1 9 RESERVED 100,000 {first} + {second}");
    let started = Instant::now();
    loop {
        let rows = match browser
            .find(fantoccini::Locator::Css("#reservations tbody"))
            .await
        {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        // Cells are apart by tabs in the page's text.
        let rows = rows.split_whitespace().collect::<Vec<_>>().join(" ");
        if rows.contains(&want) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the reservations show {rows:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    browser.close().await.unwrap();
    let _ = driver.kill().await;
}
