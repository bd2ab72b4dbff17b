//! The local server's own limits (`config::ServerSettings`), over raw TCP as a slow or hostile
//! client would use it: a connection that never finishes its request head, or sits idle after
//! an answer, is closed; a body that does not arrive in time is a 408 and writes nothing; past
//! `max_connections`, a new connection waits until one closes; with tokens, each route wants
//! its role's.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{path, TestApp};

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.base.trim_start_matches("http://"))
        .await
        .expect("connect")
}

/// What the server sends within `limit`, and whether it closed the connection by then.
async fn read_for(stream: &mut TcpStream, limit: Duration) -> (String, bool) {
    let deadline = tokio::time::Instant::now() + limit;
    let (mut got, mut chunk) = (Vec::new(), [0u8; 4096]);
    let closed = loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
            Err(_) => break false,
        }
    };
    (String::from_utf8_lossy(&got).into_owned(), closed)
}

#[tokio::test]
async fn a_connection_that_never_finishes_its_head_or_sits_idle_is_closed() {
    let app = TestApp::builder()
        .configure(|s| s.server.header_read_timeout = Duration::from_millis(300))
        .spawn()
        .await;

    let mut slow = connect(&app).await;
    slow.write_all(b"GET /health/live HTTP/1.1\r\nHost: t\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let (_, closed) = read_for(&mut slow, Duration::from_secs(5)).await;
    assert!(closed, "a half-sent head kept its connection for 5 s");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    let mut idle = connect(&app).await;
    idle.write_all(b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let (answer, closed) = read_for(&mut idle, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(closed, "an idle keep-alive connection stayed open for 5 s");
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_gets_408_and_writes_nothing() {
    let app = TestApp::builder()
        .configure(|s| s.server.request_timeout = Duration::from_millis(300))
        .spawn()
        .await;
    app.voucher("SLOW", 5, json!({})).await;
    let before = app.snapshot().await;

    let mut stream = connect(&app).await;
    // Sixty bytes announced, sixteen sent.
    stream
        .write_all(
            b"POST /vouchers/SLOW/reservations HTTP/1.1\r\nHost: t\r\n\
              Content-Type: application/json\r\nContent-Length: 60\r\n\r\n{\"customerId\":1,",
        )
        .await
        .unwrap();
    let (answer, _) = read_for(&mut stream, Duration::from_secs(3)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");
    assert_eq!(app.snapshot().await, before, "nothing written");
}

#[tokio::test]
async fn past_max_connections_a_new_connection_waits_for_a_free_one() {
    let app = TestApp::builder()
        .configure(|s| s.server.max_connections = 2)
        .spawn()
        .await;
    // Two connections take both places (a request head is not needed to hold one).
    let first = connect(&app).await;
    let _second = connect(&app).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut third = connect(&app).await;
    third
        .write_all(b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let (answer, _) = read_for(&mut third, Duration::from_millis(700)).await;
    assert_eq!(
        answer, "",
        "a third connection was served past the limit of two"
    );

    drop(first);
    let (answer, _) = read_for(&mut third, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
}

/// With tokens, each route wants a bearer token of a role template.yaml's invoke policies give
/// it: none or a wrong one is 401, the other role's is 403, and nothing is written; the
/// liveness probe stays open.
#[tokio::test]
async fn with_tokens_each_route_wants_its_roles_token() {
    let app = TestApp::builder()
        .configure(|s| s.server.tokens = Some(("order-token".into(), "ops-token".into())))
        .spawn()
        .await;
    let send = async |method: reqwest::Method, path: &str, token: Option<&str>, body: Value| {
        let mut req = app.http.request(method, app.url(path));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if !body.is_null() {
            req = req.json(&body);
        }
        let resp = req.send().await.unwrap();
        let (status, www) = (
            resp.status(),
            resp.headers().get("www-authenticate").cloned(),
        );
        (status, www, resp.text().await.unwrap())
    };
    let (order, ops) = (Some("order-token"), Some("ops-token"));
    let voucher = json!({"code": "TOK", "discountAmount": 1, "totalLimit": 5,
                         "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2030-01-01T00:00:00Z"});
    let reserve = json!({"customerId": 1, "orderId": "o1", "orderAmount": 10});
    let before = app.snapshot().await;
    use reqwest::Method as M;
    let refused = [
        (
            M::POST,
            path::vouchers(),
            None,
            voucher.clone(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            M::POST,
            path::vouchers(),
            Some("nope"),
            voucher.clone(),
            StatusCode::UNAUTHORIZED,
        ),
        (
            M::POST,
            path::vouchers(),
            order,
            voucher.clone(),
            StatusCode::FORBIDDEN,
        ),
        (
            M::GET,
            path::health(),
            None,
            Value::Null,
            StatusCode::UNAUTHORIZED,
        ),
    ];
    for (method, path, token, body, expected) in refused {
        let case = format!("{method} {path} with {token:?}");
        let (status, www, text) = send(method, &path, token, body).await;
        assert_eq!(status, expected, "{case}: {text}");
        if status == StatusCode::UNAUTHORIZED {
            assert_eq!(www.unwrap(), "Bearer", "{case}");
        }
    }
    assert_eq!(app.snapshot().await, before, "nothing written");

    let (status, _, text) = send(M::POST, &path::vouchers(), ops, voucher).await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let reservations = path::reservations("TOK");
    let (status, _, _) = send(M::POST, &reservations, ops, reserve.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "operators do not reserve");
    let (status, _, text) = send(M::POST, &reservations, order, reserve).await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    for token in [order, ops] {
        let (status, _, _) = send(M::GET, &path::voucher("TOK"), token, Value::Null).await;
        assert_eq!(status, StatusCode::OK, "{token:?} reads a voucher");
    }
    let (status, _, _) = send(M::GET, &reservations, order, Value::Null).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "the listing is the operators'"
    );
    let (status, _, _) = send(M::GET, &path::live(), None, Value::Null).await;
    assert_eq!(status, StatusCode::OK, "liveness is open");
}

/// Every method reaches the access check, not only the one a route declares: axum answers HEAD
/// with the GET handler (before the fix, `HEAD /metrics` answered 200 without a token and
/// `HEAD /vouchers/{code}` told which codes exist), and OPTIONS or any other method on a route's
/// path gets no further than the check without a token. Over every route of the table.
#[tokio::test]
async fn with_tokens_every_method_of_every_route_goes_through_the_access_check() {
    use shared::http::{Access, ROUTES};
    let app = TestApp::builder()
        .configure(|s| s.server.tokens = Some(("order-token".into(), "ops-token".into())))
        .spawn()
        .await;
    let before = app.snapshot().await;
    let methods = [
        "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE",
    ];
    for route in ROUTES {
        let concrete = route
            .path
            .replace("{code}", "TOK")
            .replace("{order_id}", "o1")
            .replace("{id}", "1");
        let open = ROUTES
            .iter()
            .filter(|r| r.path == route.path)
            .all(|r| r.access == Access::Open);
        for method in methods {
            let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let case = format!("{method} {concrete}");
            let status = app
                .http
                .request(method.clone(), app.url(&concrete))
                .send()
                .await
                .unwrap()
                .status();
            if open {
                assert_ne!(status, StatusCode::UNAUTHORIZED, "{case}");
            } else {
                assert_eq!(status, StatusCode::UNAUTHORIZED, "{case} without a token");
            }
        }
        // HEAD is GET's: the role GET refuses is refused on HEAD too.
        if route.method == "GET" && route.access == Access::Operators {
            let status = app
                .http
                .head(app.url(&concrete))
                .bearer_auth("order-token")
                .send()
                .await
                .unwrap()
                .status();
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "HEAD {concrete} with the order service's token"
            );
        }
    }
    assert_eq!(app.snapshot().await, before, "nothing written");
}

/// A body well past the limit is read (up to `DRAIN_LIMIT`) before the 413, so a client still
/// sending it finishes sending and reads the answer, instead of a reset connection; nothing is
/// written.
#[tokio::test]
async fn a_megabyte_body_gets_its_413_not_a_broken_connection() {
    let app = TestApp::spawn().await;
    app.voucher("BIG", 5, json!({})).await;
    let before = app.snapshot().await;
    let body = format!(
        "{{\"customerId\":1,\"orderId\":\"o\",\"orderAmount\":1,\"pad\":\"{}\"}}",
        "x".repeat(3 << 19)
    );
    let mut stream = connect(&app).await;
    let head = format!(
        "POST /vouchers/BIG/reservations HTTP/1.1\r\nHost: t\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // In pieces, as a client on a real network sends it: the server sees the limit pass long
    // before the last byte.
    for piece in body.as_bytes().chunks(64 << 10) {
        stream
            .write_all(piece)
            .await
            .expect("the server closed the connection while the body was still coming");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (answer, _) = read_for(&mut stream, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer:?}");
    assert!(answer.contains("16384"), "{answer}");
    assert_eq!(app.snapshot().await, before, "nothing written");
}
