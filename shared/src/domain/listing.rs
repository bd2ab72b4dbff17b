//! Listings: the `GET /vouchers`, `GET /vouchers/{code}/reservations`, `GET /campaigns` and
//! `GET /campaigns/{id}/codes` queries, their page size, their opaque cursors, and the [`Page`] they answer with.

use serde::{Deserialize, Serialize};

use super::{Invalid, OrderId, Status, VoucherCode};

/// A page of a listing: `next` is the cursor of the page after it (None: the last page).
#[derive(Debug, Clone, Serialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

/// Most items a listing page holds, and how many when `limit` is absent.
pub const MAX_PAGE: i64 = 100;
pub const DEFAULT_PAGE: i64 = 50;

/// A listing's position: the key of the last item of the page before, as an opaque URL-safe
/// string (a cursor of one listing is refused by another).
fn cursor_encode(kind: &str, key: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{kind}:{key}"))
}

fn cursor_decode(kind: &str, cursor: &str) -> Result<String, Invalid> {
    use base64::Engine;
    let bad = || {
        Invalid::new(
            "after",
            "not a cursor of this listing: pass a page's `next`",
        )
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    text.strip_prefix(kind)
        .and_then(|rest| rest.strip_prefix(':'))
        .map(str::to_owned)
        .ok_or_else(bad)
}

fn page_limit(raw: Option<&str>) -> Result<i64, Invalid> {
    let Some(raw) = raw else {
        return Ok(DEFAULT_PAGE);
    };
    raw.parse::<i64>()
        .ok()
        .filter(|n| (1..=MAX_PAGE).contains(n))
        .ok_or_else(|| Invalid::new("limit", format!("must be an integer from 1 to {MAX_PAGE}")))
}

/// `GET /vouchers` query, as received.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VoucherListQuery {
    pub limit: Option<String>,
    pub after: Option<String>,
}

/// A page of the voucher listing, in code order.
#[derive(Debug, Clone)]
pub struct VoucherList {
    pub after: Option<VoucherCode>,
    pub limit: i64,
}

impl VoucherList {
    pub fn parse(q: VoucherListQuery) -> Result<Self, Invalid> {
        let after = match q.after.as_deref() {
            None => None,
            Some(cursor) => Some(
                VoucherCode::parse(&cursor_decode("v", cursor)?)
                    .map_err(|_| Invalid::new("after", "not a cursor of this listing"))?,
            ),
        };
        Ok(VoucherList {
            after,
            limit: page_limit(q.limit.as_deref())?,
        })
    }

    /// The `next` of a page whose last item is `code`.
    pub fn cursor(code: &str) -> String {
        cursor_encode("v", code)
    }
}

/// `GET /vouchers/{code}/reservations` query, as received.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReservationListQuery {
    pub status: Option<String>,
    pub customer_id: Option<String>,
    pub limit: Option<String>,
    pub after: Option<String>,
}

/// A page of a voucher's reservations, in orderId order, optionally of one status or customer.
#[derive(Debug, Clone)]
pub struct ReservationList {
    pub code: VoucherCode,
    pub status: Option<Status>,
    pub customer_id: Option<i64>,
    pub after: Option<OrderId>,
    pub limit: i64,
}

impl ReservationList {
    pub fn parse(code: VoucherCode, q: ReservationListQuery) -> Result<Self, Invalid> {
        let status = match q.status.as_deref() {
            None => None,
            Some("RESERVED") => Some(Status::Reserved),
            Some("CONFIRMED") => Some(Status::Confirmed),
            Some("RELEASED") => Some(Status::Released),
            Some(_) => {
                return Err(Invalid::new(
                    "status",
                    "must be RESERVED, CONFIRMED or RELEASED",
                ))
            }
        };
        let customer_id = match q.customer_id.as_deref() {
            None => None,
            Some(raw) => Some(raw.parse::<i64>().ok().filter(|c| *c >= 1).ok_or_else(|| {
                Invalid::new("customerId", "must be an integer from 1 to 2^63-1")
            })?),
        };
        let after = match q.after.as_deref() {
            None => None,
            Some(cursor) => Some(
                OrderId::parse(&cursor_decode("o", cursor)?)
                    .map_err(|_| Invalid::new("after", "not a cursor of this listing"))?,
            ),
        };
        Ok(ReservationList {
            code,
            status,
            customer_id,
            after,
            limit: page_limit(q.limit.as_deref())?,
        })
    }

    /// The `next` of a page whose last item is `order_id`.
    pub fn cursor(order_id: &str) -> String {
        cursor_encode("o", order_id)
    }
}

/// `GET /campaigns` query, as received.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CampaignListQuery {
    pub limit: Option<String>,
    pub after: Option<String>,
}

/// A page of the campaign listing, in id order.
#[derive(Debug, Clone)]
pub struct CampaignList {
    pub after: Option<i64>,
    pub limit: i64,
}

impl CampaignList {
    pub fn parse(q: CampaignListQuery) -> Result<Self, Invalid> {
        let after = match q.after.as_deref() {
            None => None,
            Some(cursor) => Some(
                cursor_decode("c", cursor)?
                    .parse::<i64>()
                    .map_err(|_| Invalid::new("after", "not a cursor of this listing"))?,
            ),
        };
        Ok(CampaignList {
            after,
            limit: page_limit(q.limit.as_deref())?,
        })
    }

    /// The `next` of a page whose last item is campaign `id`.
    pub fn cursor(id: i64) -> String {
        cursor_encode("c", &id.to_string())
    }
}

/// `GET /campaigns/{id}/codes` query, as received.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeListQuery {
    pub status: Option<String>,
    pub limit: Option<String>,
    pub after: Option<String>,
}

/// Which of a campaign's codes a listing shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeStatus {
    /// No active use.
    Unused,
    /// At least one active use (RESERVED or CONFIRMED).
    Used,
}

/// A page of a campaign's codes, in code order, optionally only the used or unused ones. A
/// CSV download is the same listing without pages: from `after` to the end.
#[derive(Debug, Clone)]
pub struct CodeList {
    pub campaign: i64,
    pub status: Option<CodeStatus>,
    pub after: Option<VoucherCode>,
    pub limit: i64,
}

impl CodeList {
    pub fn parse(campaign: i64, q: CodeListQuery) -> Result<Self, Invalid> {
        let status = match q.status.as_deref() {
            None => None,
            Some("unused") => Some(CodeStatus::Unused),
            Some("used") => Some(CodeStatus::Used),
            Some(_) => return Err(Invalid::new("status", "must be unused or used")),
        };
        let after = match q.after.as_deref() {
            None => None,
            Some(cursor) => Some(
                VoucherCode::parse(&cursor_decode("k", cursor)?)
                    .map_err(|_| Invalid::new("after", "not a cursor of this listing"))?,
            ),
        };
        Ok(CodeList {
            campaign,
            status,
            after,
            limit: page_limit(q.limit.as_deref())?,
        })
    }

    /// The `next` of a page whose last item is `code`.
    pub fn cursor(code: &str) -> String {
        cursor_encode("k", code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_another_listings() {
        let next = ReservationList::cursor("order:1");
        let q = |after: &str| ReservationListQuery {
            after: Some(after.to_owned()),
            ..Default::default()
        };
        let code = VoucherCode::parse("A").unwrap();
        let list = ReservationList::parse(code.clone(), q(&next)).unwrap();
        assert_eq!(list.after.unwrap().as_str(), "order:1");
        assert_eq!(list.limit, DEFAULT_PAGE);
        for bad in [VoucherList::cursor("A"), "!!".to_owned(), "b3Ih".to_owned()] {
            assert_eq!(
                ReservationList::parse(code.clone(), q(&bad))
                    .unwrap_err()
                    .field,
                "after",
                "{bad}"
            );
        }
        for (limit, ok) in [
            ("1", true),
            ("100", true),
            ("0", false),
            ("101", false),
            ("x", false),
        ] {
            let r = VoucherList::parse(VoucherListQuery {
                limit: Some(limit.into()),
                after: None,
            });
            assert_eq!(r.is_ok(), ok, "{limit}");
        }
    }
}
