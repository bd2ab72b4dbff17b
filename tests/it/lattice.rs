//! `fg_merge` against the lattice as the domain states it (`Status::merge`, `active_delta`):
//! for every stored status (or none) and every incoming one, Postgres stores the merge and moves
//! the voucher's and the customer's counters by the change in activeness.

use serde_json::json;
use shared::domain::{active_delta, Held, Status};
use shared::store::{Merge, MergeOutcome};

use crate::harness::{voucher_code, TestApp};

const ALL: [Status; 3] = [Status::Reserved, Status::Confirmed, Status::Released];

#[tokio::test]
async fn fg_merge_stores_the_lattice_merge_and_moves_counters_by_activeness() {
    let app = TestApp::spawn().await;
    app.voucher("LATTICE", 100, json!({})).await;
    let code = voucher_code("LATTICE");
    let store = app.app.store();
    let now = chrono::Utc::now().timestamp_millis();
    let mut customer = 0;
    for old in [
        None,
        Some(Status::Reserved),
        Some(Status::Confirmed),
        Some(Status::Released),
    ] {
        for incoming in ALL {
            customer += 1;
            let order = format!("o{customer}");
            let held = Held {
                customer_id: customer,
                reserved_ms: now,
                expires_ms: now + 60_000,
                discount: 7,
            };
            let merge = |status| Merge::held(&code, &order, held, 100, status);
            // The stored status, reached the way the service reaches it (through the lattice).
            if let Some(old) = old {
                for step in ALL.into_iter().filter(|s| *s <= old) {
                    store.merge(&merge(step)).await.unwrap();
                }
            }
            let before = app.counts("LATTICE").await;
            let merged = store.merge(&merge(incoming)).await.unwrap();
            let after = app.counts("LATTICE").await;

            let expected = old.map_or(incoming, |o| o.merge(incoming));
            let row = merged.row.expect("a row");
            assert_eq!(row.status, expected, "{old:?} + {incoming:?}");
            let delta = i64::from(active_delta(old, expected));
            assert_eq!(
                after.used_count - before.used_count,
                delta,
                "used count, {old:?} + {incoming:?}"
            );
            assert_eq!(
                after.customer_counter_sum - before.customer_counter_sum,
                delta,
                "customer counter, {old:?} + {incoming:?}"
            );
            let changed = old != Some(expected);
            assert_eq!(
                merged.outcome,
                if changed {
                    MergeOutcome::Applied
                } else {
                    MergeOutcome::Unchanged
                },
                "{old:?} + {incoming:?}"
            );
        }
    }
}
