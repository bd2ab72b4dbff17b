//! Names and metadata on vouchers and campaigns: accepted at creation, merged key by key by
//! PATCH (`null` removes), shown by every view and listing, bounded with a 400 naming the
//! field, and never half-written with a change of the rules.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::TestApp;

fn error(body: &Value) -> (&str, &str) {
    (
        body["error"].as_str().unwrap_or(""),
        body["message"].as_str().unwrap_or(""),
    )
}

fn window() -> (String, String) {
    let now = chrono::Utc::now();
    (
        (now - chrono::Duration::hours(1)).to_rfc3339(),
        (now + chrono::Duration::hours(1)).to_rfc3339(),
    )
}

#[tokio::test]
async fn a_vouchers_name_and_metadata_are_kept_merged_and_shown() {
    let app = TestApp::spawn().await;
    let created = app
        .voucher(
            "NAMED",
            10,
            json!({"name": "Winter sale", "metadata": {"channel": "email", "owner": "ana"}}),
        )
        .await;
    assert_eq!(created["name"], "Winter sale");
    assert_eq!(
        created["metadata"],
        json!({"channel": "email", "owner": "ana"})
    );
    let plain = app.voucher("PLAIN", 10, json!({})).await;
    assert_eq!(
        (&plain["name"], &plain["metadata"]),
        (&Value::Null, &json!({}))
    );

    // Merged key by key: a new key, a changed one, one removed; the name changes.
    let (status, patched) = app
        .patch_voucher(
            "NAMED",
            json!({"name": "Winter sale, week 2", "metadata": {"owner": "bo", "channel": null, "wave": "2"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["name"], "Winter sale, week 2");
    assert_eq!(patched["metadata"], json!({"owner": "bo", "wave": "2"}));
    assert_eq!(patched["totalLimit"], 10, "no rule moved");

    // Every view and listing shows them.
    let (_, view) = app.get_voucher("named").await;
    assert_eq!(view["metadata"], json!({"owner": "bo", "wave": "2"}));
    let (_, page) = app.list_vouchers(&[]).await;
    let listed = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["code"] == "NAMED")
        .unwrap();
    assert_eq!(listed["name"], "Winter sale, week 2");

    // null removes the name.
    let (_, patched) = app.patch_voucher("NAMED", json!({"name": null})).await;
    assert_eq!(patched["name"], Value::Null);
    assert_eq!(patched["metadata"], json!({"owner": "bo", "wave": "2"}));

    // A reserve does not see them.
    assert_eq!(
        app.reserve("NAMED", 1, "o1", 10).await.0,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn names_and_metadata_out_of_bounds_answer_400_naming_the_field_and_write_nothing() {
    let app = TestApp::spawn().await;
    let (starts, ends) = window();
    let body = |extra: Value| {
        let mut b = json!({"code": "BOUNDED", "discountAmount": 100, "totalLimit": 5,
                           "startsAt": starts, "endsAt": ends});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    let many: serde_json::Map<String, Value> =
        (0..51).map(|i| (format!("k{i}"), json!("v"))).collect();
    for (extra, field) in [
        (json!({"name": ""}), "name"),
        (json!({"name": "n".repeat(201)}), "name"),
        (json!({"name": "a\u{0}b"}), "name"),
        (json!({"metadata": many}), "metadata"),
        (json!({"metadata": {"k".repeat(41): "v"}}), "metadata"),
        (json!({"metadata": {"k": "v".repeat(501)}}), "metadata"),
        (json!({"metadata": {"k": 1}}), "metadata"),
    ] {
        let (status, answer) = app.create_voucher(body(extra.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {answer}");
        let (code, message) = error(&answer);
        assert_eq!(code, "INVALID_REQUEST");
        assert!(message.starts_with(field), "{extra}: {message}");
    }
    assert_eq!(app.get_voucher("BOUNDED").await.0, StatusCode::NOT_FOUND);

    // 50 keys fit; a PATCH whose merge would leave 51 is refused, with the change of the
    // rules beside it: nothing of either is written.
    let fifty: serde_json::Map<String, Value> =
        (0..50).map(|i| (format!("k{i}"), json!("v"))).collect();
    let (status, _) = app.create_voucher(body(json!({"metadata": fifty}))).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, answer) = app
        .patch_voucher(
            "BOUNDED",
            json!({"totalLimit": 9, "name": "late", "metadata": {"one-more": "v"}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(error(&answer).1.starts_with("metadata"), "{answer}");
    let (_, view) = app.get_voucher("BOUNDED").await;
    assert_eq!(
        (&view["totalLimit"], &view["name"]),
        (&json!(5), &Value::Null)
    );
    assert_eq!(view["metadata"].as_object().unwrap().len(), 50);
    // Removing one makes room for another, in one PATCH.
    let (status, view) = app
        .patch_voucher(
            "BOUNDED",
            json!({"metadata": {"k0": null, "one-more": "v"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["metadata"].as_object().unwrap().len(), 50);
}

#[tokio::test]
async fn a_flash_vouchers_metadata_changes_without_touching_its_gate() {
    let app = TestApp::spawn().await;
    app.voucher("FLASHNAMED", 5, json!({"flashSale": true}))
        .await;
    assert_eq!(
        app.reserve("FLASHNAMED", 1, "o1", 10).await.0,
        StatusCode::CREATED
    );
    let (status, view) = app
        .patch_voucher(
            "FLASHNAMED",
            json!({"name": "Flash", "metadata": {"k": "v"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(
        (view["name"].as_str(), view["usedCount"].as_i64()),
        (Some("Flash"), Some(1))
    );
    assert_eq!(app.gate_remaining("FLASHNAMED").await, Some(4));
    assert_eq!(
        app.reserve("FLASHNAMED", 2, "o2", 10).await.0,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn a_campaigns_name_and_metadata_are_kept_merged_and_shown() {
    let app = TestApp::spawn().await;
    let (starts, ends) = window();
    let (status, created) = app
        .create_campaign(json!({
            "name": "Loyalty", "metadata": {"team": "crm"},
            "discountAmount": 100, "startsAt": starts, "endsAt": ends,
            "codes": ["LOYAL-1", "LOYAL-2"],
        }))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(
        (created["name"].as_str(), &created["metadata"]),
        (Some("Loyalty"), &json!({"team": "crm"}))
    );
    let id = created["id"].as_i64().unwrap();

    let (status, patched) = app
        .patch_campaign(id, json!({"metadata": {"team": null, "wave": "1"}}))
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["metadata"], json!({"wave": "1"}));
    let (status, patched) = app
        .patch_campaign(id, json!({"totalLimit": 10, "name": "Loyalty 2"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(
        (patched["name"].as_str(), patched["totalLimit"].as_i64()),
        (Some("Loyalty 2"), Some(10))
    );

    let (_, view) = app.campaign(id).await;
    assert_eq!(view["name"], "Loyalty 2");
    let (_, page) = app.list_campaigns(&[]).await;
    assert_eq!(page["items"][0]["metadata"], json!({"wave": "1"}));
    // A code is a voucher of its own, with no name of its own.
    let (_, code) = app.get_voucher("LOYAL-1").await;
    assert_eq!(
        (&code["name"], &code["metadata"]),
        (&Value::Null, &json!({}))
    );

    let (status, answer) = app.patch_campaign(id, json!({"name": ""})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error(&answer).1.starts_with("name"), "{answer}");
    let (status, _) = app.patch_campaign(id + 1000, json!({"name": "x"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
