//! One typed method per route of the API (`shared::http::ROUTES`), so that a test names what
//! it does ("confirm this order") rather than spelling a path; and [`path`], the same paths for
//! the requests a test builds by hand ([`Request`]) to send what the typed methods cannot:
//! malformed bodies, bad path segments, unknown routes.
//!
//! Every typed method answers the status and the body parsed as JSON (`Null` when empty),
//! except [`TestApp::reserve`], which keeps the raw text: replays are compared byte for byte.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::TestApp;

/// The paths of `shared::http::ROUTES`, segments inserted as given (not encoded: a test may
/// pass a segment that is deliberately bad).
pub mod path {
    pub fn health() -> String {
        "/health".to_owned()
    }

    pub fn live() -> String {
        "/health/live".to_owned()
    }

    pub fn openapi() -> String {
        "/openapi.json".to_owned()
    }

    pub fn vouchers() -> String {
        "/vouchers".to_owned()
    }

    pub fn voucher(code: &str) -> String {
        format!("/vouchers/{code}")
    }

    pub fn warmup(code: &str) -> String {
        format!("/vouchers/{code}/warmup")
    }

    pub fn validations(code: &str) -> String {
        format!("/vouchers/{code}/validations")
    }

    pub fn reservations(code: &str) -> String {
        format!("/vouchers/{code}/reservations")
    }

    pub fn reservation(code: &str, order: &str) -> String {
        format!("/vouchers/{code}/reservations/{order}")
    }

    pub fn confirm(code: &str, order: &str) -> String {
        format!("/vouchers/{code}/reservations/{order}/confirm")
    }

    pub fn order_reservations(order: &str) -> String {
        format!("/orders/{order}/reservations")
    }

    pub fn order(order: &str) -> String {
        format!("/orders/{order}")
    }

    pub fn order_confirm(order: &str) -> String {
        format!("/orders/{order}/confirm")
    }

    pub fn campaigns() -> String {
        "/campaigns".to_owned()
    }

    pub fn campaign(id: i64) -> String {
        format!("/campaigns/{id}")
    }

    pub fn campaign_codes(id: i64) -> String {
        format!("/campaigns/{id}/codes")
    }

    /// `path` with a query string made of `pairs` (none: `path` alone).
    pub fn with_query(path: String, pairs: &[(&str, &str)]) -> String {
        if pairs.is_empty() {
            return path;
        }
        let mut url = reqwest::Url::parse("http://query.invalid").unwrap();
        url.query_pairs_mut().extend_pairs(pairs);
        format!("{path}?{}", url.query().unwrap_or(""))
    }
}

/// A request built by hand, for what the typed methods cannot send (see the module docs).
#[derive(Debug, Clone)]
pub struct Request {
    pub method: &'static str,
    pub path: String,
    pub body: Option<String>,
}

impl Request {
    pub fn new(method: &'static str, path: impl Into<String>, body: Option<String>) -> Self {
        Request {
            method,
            path: path.into(),
            body,
        }
    }

    pub fn get(path: impl Into<String>) -> Self {
        Self::new("GET", path, None)
    }

    pub fn delete(path: impl Into<String>) -> Self {
        Self::new("DELETE", path, None)
    }

    /// A POST with no body.
    pub fn post_empty(path: impl Into<String>) -> Self {
        Self::new("POST", path, None)
    }

    /// With this body, sent as it is (it need not be JSON).
    pub fn raw(method: &'static str, path: impl Into<String>, body: impl Into<String>) -> Self {
        Self::new(method, path, Some(body.into()))
    }

    pub fn post(path: impl Into<String>, body: impl Into<String>) -> Self {
        Self::raw("POST", path, body)
    }

    pub fn patch(path: impl Into<String>, body: impl Into<String>) -> Self {
        Self::raw("PATCH", path, body)
    }
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

impl TestApp {
    /// Sends a request built by hand; the status and the raw body text.
    pub async fn send(&self, request: &Request) -> (StatusCode, String) {
        self.call(request.method, &request.path, request.body.as_deref())
            .await
    }

    /// `GET /health`: readiness.
    pub async fn health(&self) -> (StatusCode, Value) {
        self.json("GET", &path::health(), None).await
    }

    /// `GET /health/live`: liveness.
    pub async fn live(&self) -> (StatusCode, Value) {
        self.json("GET", &path::live(), None).await
    }

    /// `GET /openapi.json`.
    #[allow(dead_code)] // no test reads it over HTTP yet; here so that every route has one
    pub async fn openapi(&self) -> (StatusCode, Value) {
        self.json("GET", &path::openapi(), None).await
    }

    /// `POST /vouchers` with exactly this body ([`TestApp::voucher`] fills in a valid one).
    pub async fn create_voucher(&self, body: Value) -> (StatusCode, Value) {
        self.json("POST", &path::vouchers(), Some(body)).await
    }

    /// `GET /vouchers`, with these query parameters.
    pub async fn list_vouchers(&self, query: &[(&str, &str)]) -> (StatusCode, Value) {
        let path = path::with_query(path::vouchers(), query);
        self.json("GET", &path, None).await
    }

    /// `GET /vouchers/{code}`, as it answers ([`TestApp::view`] expects it found).
    pub async fn get_voucher(&self, code: &str) -> (StatusCode, Value) {
        self.json("GET", &path::voucher(code), None).await
    }

    /// `PATCH /vouchers/{code}`.
    pub async fn patch_voucher(&self, code: &str, body: Value) -> (StatusCode, Value) {
        self.json("PATCH", &path::voucher(code), Some(body)).await
    }

    /// `POST /vouchers/{code}/warmup`.
    pub async fn warmup(&self, code: &str) -> (StatusCode, Value) {
        self.json("POST", &path::warmup(code), None).await
    }

    /// `POST /vouchers/{code}/validations` for this customer and order amount.
    pub async fn validate(&self, code: &str, customer: i64, amount: i64) -> (StatusCode, Value) {
        let body = json!({"customerId": customer, "orderAmount": amount});
        self.json("POST", &path::validations(code), Some(body))
            .await
    }

    /// `POST /vouchers/{code}/reservations`: the status and the raw body text.
    pub async fn reserve(
        &self,
        code: &str,
        customer: i64,
        order: &str,
        amount: i64,
    ) -> (StatusCode, String) {
        let body = json!({"customerId": customer, "orderId": order, "orderAmount": amount});
        self.call("POST", &path::reservations(code), Some(&body.to_string()))
            .await
    }

    /// Sends every reserve of `requests` (customer, orderId) at once, for an order of
    /// `amount`: each on its own task, all released together by one barrier. The answers, in
    /// request order.
    pub async fn reserve_all(
        self: &Arc<Self>,
        code: &str,
        requests: Vec<(i64, String)>,
        amount: i64,
    ) -> Vec<(StatusCode, String)> {
        let requests = requests
            .into_iter()
            .map(|(customer, order)| (customer, order, amount))
            .collect();
        self.reserve_each(code, requests).await
    }

    /// [`TestApp::reserve_all`] with an order amount of its own for each request (customer,
    /// orderId, orderAmount).
    pub async fn reserve_each(
        self: &Arc<Self>,
        code: &str,
        requests: Vec<(i64, String, i64)>,
    ) -> Vec<(StatusCode, String)> {
        let requests = requests
            .into_iter()
            .map(|(customer, order, amount)| (code.to_owned(), customer, order, amount))
            .collect();
        self.reserve_codes(requests).await
    }

    /// [`TestApp::reserve_each`] over codes of their own (code, customer, orderId,
    /// orderAmount): a campaign's codes at once.
    pub async fn reserve_codes(
        self: &Arc<Self>,
        requests: Vec<(String, i64, String, i64)>,
    ) -> Vec<(StatusCode, String)> {
        let barrier = Arc::new(tokio::sync::Barrier::new(requests.len()));
        let tasks: Vec<_> = requests
            .into_iter()
            .map(|(code, customer, order, amount)| {
                let (app, barrier) = (self.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    app.reserve(&code, customer, &order, amount).await
                })
            })
            .collect();
        let mut answers = Vec::with_capacity(tasks.len());
        for task in tasks {
            answers.push(task.await.unwrap());
        }
        answers
    }

    /// `GET /vouchers/{code}/reservations`, with these query parameters.
    pub async fn list_reservations(
        &self,
        code: &str,
        query: &[(&str, &str)],
    ) -> (StatusCode, Value) {
        let path = path::with_query(path::reservations(code), query);
        self.json("GET", &path, None).await
    }

    /// `GET /vouchers/{code}/reservations/{order}`.
    pub async fn get_reservation(&self, code: &str, order: &str) -> (StatusCode, Value) {
        self.json("GET", &path::reservation(code, order), None)
            .await
    }

    /// `DELETE /vouchers/{code}/reservations/{order}`: a release (`Null` body on success).
    pub async fn release(&self, code: &str, order: &str) -> (StatusCode, Value) {
        self.json("DELETE", &path::reservation(code, order), None)
            .await
    }

    /// `POST /vouchers/{code}/reservations/{order}/confirm`.
    pub async fn confirm(&self, code: &str, order: &str) -> (StatusCode, Value) {
        self.json("POST", &path::confirm(code, order), None).await
    }

    /// `POST /orders/{order}/reservations`: every code of `codes` or none; the status and the
    /// raw body text (replays are compared byte for byte).
    pub async fn reserve_order(
        &self,
        order: &str,
        customer: i64,
        amount: i64,
        codes: &[&str],
    ) -> (StatusCode, String) {
        let body = json!({"customerId": customer, "orderAmount": amount, "codes": codes});
        self.call(
            "POST",
            &path::order_reservations(order),
            Some(&body.to_string()),
        )
        .await
    }

    /// `GET /orders/{order}`.
    pub async fn get_order(&self, order: &str) -> (StatusCode, Value) {
        self.json("GET", &path::order(order), None).await
    }

    /// `POST /orders/{order}/confirm`.
    pub async fn confirm_order(&self, order: &str) -> (StatusCode, Value) {
        self.json("POST", &path::order_confirm(order), None).await
    }

    /// `DELETE /orders/{order}`: every code released (`Null` body on success).
    pub async fn release_order(&self, order: &str) -> (StatusCode, Value) {
        self.json("DELETE", &path::order(order), None).await
    }

    /// `POST /campaigns`.
    pub async fn create_campaign(&self, body: Value) -> (StatusCode, Value) {
        self.json("POST", &path::campaigns(), Some(body)).await
    }

    /// `GET /campaigns/{id}`.
    pub async fn campaign(&self, id: i64) -> (StatusCode, Value) {
        self.json("GET", &path::campaign(id), None).await
    }

    /// `GET /campaigns`, with these query parameters.
    pub async fn list_campaigns(&self, query: &[(&str, &str)]) -> (StatusCode, Value) {
        self.json("GET", &path::with_query(path::campaigns(), query), None)
            .await
    }

    /// `PATCH /campaigns/{id}`.
    pub async fn patch_campaign(&self, id: i64, body: Value) -> (StatusCode, Value) {
        self.json("PATCH", &path::campaign(id), Some(body)).await
    }

    /// `GET /campaigns/{id}/codes`, with these query parameters.
    pub async fn campaign_codes(&self, id: i64, query: &[(&str, &str)]) -> (StatusCode, Value) {
        let path = path::with_query(path::campaign_codes(id), query);
        self.json("GET", &path, None).await
    }
}
