//! Campaigns: creating one with its codes (generated or imported), reading, listing and
//! changing them (a campaign's codes are listed by `campaign_codes`).
//!
//! A campaign's codes are written in chunks of [`CODE_CHUNK`], each one statement that inserts
//! the chunk's voucher rows and their slots (`ON CONFLICT DO NOTHING`, so a code that exists
//! already is seen, not raised), all in the campaign's one transaction: a refused import or a
//! failure leaves nothing behind. Generated codes come in code order, so each chunk appends to
//! the indexes where the one before stopped.

use std::collections::HashSet;

use tokio_postgres::types::Type;

use super::descriptions::{describe_in, DescribeOutcome, Described};
use super::rows::page_next;
use super::Store;
use super::StoreError;
use crate::domain::{
    Budget, CampaignList, CampaignPatch, CampaignView, CodeRng, Discount, NewCampaign, NewCodes,
    Page, VoucherCode,
};
use crate::telemetry::metrics::{timed, Dependency};

/// Codes written per statement.
const CODE_CHUNK: usize = 10_000;
/// Draws of a generated code whose range keeps meeting existing codes before giving up.
const REDRAWS: usize = 8;

/// One chunk of codes: their vouchers (the campaign's rules, one slot capped at the per-code
/// limit) and slots. Returns the codes written.
const INSERT_CODES: &str = "
    WITH ins AS (
      INSERT INTO voucher (code, discount_amount, discount_percent, max_discount_amount,
                           min_order_amount, total_limit, per_user_limit, starts_at, ends_at,
                           flash_sale, active, reservation_ttl_seconds, counter_slots,
                           campaign_id)
      SELECT c, g.discount_amount, g.discount_percent, g.max_discount_amount,
             g.min_order_amount, g.per_code_limit, g.per_code_limit, g.starts_at, g.ends_at,
             false, true, g.reservation_ttl_seconds, 1, g.id
        FROM unnest($1::text[]) c, campaign g
       WHERE g.id = $2
      ON CONFLICT (code) DO NOTHING
      RETURNING code, total_limit),
    s AS (
      INSERT INTO voucher_slot (voucher_code, slot, cap, campaign)
      SELECT code, 0, total_limit, true FROM ins)
    SELECT code FROM ins";

/// The campaign view's columns.
const CAMPAIGN_VIEW: &str = "
    SELECT g.id, g.discount_amount, g.discount_percent, g.max_discount_amount,
           g.min_order_amount, g.starts_at, g.ends_at, g.active, g.reservation_ttl_seconds,
           g.per_code_limit, g.per_user_limit, g.code_count, g.created_at, g.flash_sale, g.exclusive,
           g.name, g.metadata::text AS metadata, k.total_limit, k.used, k.budget_amount, k.budget_used
      FROM campaign g JOIN campaign_counter k ON k.campaign_id = g.id";

fn campaign_view(row: &tokio_postgres::Row) -> CampaignView {
    let discount = Discount::from_columns(
        row.get("discount_amount"),
        row.get("discount_percent"),
        row.get("max_discount_amount"),
    );
    let (discount_amount, discount_percent, max_discount_amount) = discount.columns();
    let budget_amount: Option<i64> = row.get("budget_amount");
    CampaignView {
        id: row.get("id"),
        discount_amount,
        discount_percent,
        max_discount_amount,
        min_order_amount: row.get("min_order_amount"),
        starts_at: row.get("starts_at"),
        ends_at: row.get("ends_at"),
        flash_sale: row.get("flash_sale"),
        exclusive: row.get("exclusive"),
        active: row.get("active"),
        reservation_ttl_seconds: row.get::<_, i32>("reservation_ttl_seconds").into(),
        per_code_limit: row.get::<_, i32>("per_code_limit").into(),
        total_limit: row.get("total_limit"),
        per_user_limit: row.get::<_, Option<i32>>("per_user_limit").map(i64::from),
        code_count: row.get("code_count"),
        used_count: row.get("used"),
        in_flight_count: 0,
        budget: budget_amount.map(|amount| Budget::of(amount, row.get("budget_used"))),
        created_at: row.get("created_at"),
        name: row.get("name"),
        metadata: super::descriptions::metadata_of(row).unwrap_or_default(),
    }
}

/// What creating a campaign came to. Refused: nothing was written.
#[derive(Debug)]
pub enum CampaignCreated {
    Created(Box<CampaignView>),
    /// An imported code is a voucher's or another campaign's already.
    CodeTaken(String),
    /// Generated codes kept meeting existing ones: this many could not be drawn.
    CodesExhausted(u64),
}

/// What changing a campaign came to. Refused: nothing was written.
#[derive(Debug)]
pub enum CampaignPatched {
    Patched(Box<CampaignView>),
    NotFound,
    /// The uses held exceed the new limit. Postgres' detail.
    LimitBelowUsed(String),
    /// The discounts held exceed the new budget. Postgres' detail.
    BudgetBelowUsed(String),
    /// The window would end before it starts. Postgres' detail.
    WindowInverted(String),
    /// The metadata's merge would leave too many keys.
    TooManyKeys,
}

impl Store {
    pub async fn create_campaign(&self, c: &NewCampaign) -> Result<CampaignCreated, StoreError> {
        timed(Dependency::Postgres, "create_campaign", async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(StoreError::from)?;
            let r = &c.rules;
            let (amount, percent, cap) = r.discount.columns();
            let metadata = serde_json::to_string(&c.metadata).expect("strings serialise");
            let row = tx
                .query_typed(
                    "INSERT INTO campaign (discount_amount, discount_percent, max_discount_amount,
                                           min_order_amount, starts_at, ends_at, active,
                                           reservation_ttl_seconds, per_code_limit,
                                           per_user_limit, flash_sale, name, metadata, exclusive)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::jsonb, $14)
                     RETURNING id",
                    &[
                        (&amount, Type::INT8),
                        (&percent, Type::INT2),
                        (&cap, Type::INT8),
                        (&r.min_order_amount, Type::INT8),
                        (&r.starts_at, Type::TIMESTAMPTZ),
                        (&r.ends_at, Type::TIMESTAMPTZ),
                        (&r.active, Type::BOOL),
                        (&r.reservation_ttl_seconds, Type::INT4),
                        (&r.per_code_limit, Type::INT4),
                        (&r.per_user_limit, Type::INT4),
                        (&r.flash_sale, Type::BOOL),
                        (&c.name, Type::TEXT),
                        (&metadata, Type::TEXT),
                        (&c.exclusive, Type::BOOL),
                    ],
                )
                .await
                .map_err(StoreError::from)?;
            let id: i64 = row.first().ok_or(StoreError::NoRow)?.get(0);
            tx.query_typed(
                "INSERT INTO campaign_counter (campaign_id, total_limit, budget_amount)
                 VALUES ($1, $2, $3)",
                &[
                    (&id, Type::INT8),
                    (&r.total_limit, Type::INT8),
                    (&r.budget_amount, Type::INT8),
                ],
            )
            .await
            .map_err(StoreError::from)?;

            match &c.codes {
                NewCodes::Import(codes) => {
                    for chunk in codes.chunks(CODE_CHUNK) {
                        let asked: Vec<&str> = chunk.iter().map(VoucherCode::as_str).collect();
                        let written = insert_codes(&tx, &asked, id).await?;
                        if let Some(taken) = asked.iter().find(|code| !written.contains(**code)) {
                            return Ok(CampaignCreated::CodeTaken((*taken).to_owned()));
                        }
                    }
                }
                NewCodes::Generate(pattern) => {
                    let mut rng = CodeRng::from_os();
                    let mut start = 0;
                    while start < pattern.count {
                        let end = (start + CODE_CHUNK as u64).min(pattern.count);
                        let mut pending: Vec<(u64, String)> = (start..end)
                            .map(|i| (i, pattern.draw(&mut rng, i)))
                            .collect();
                        for _ in 0..REDRAWS {
                            let asked: Vec<&str> =
                                pending.iter().map(|(_, c)| c.as_str()).collect();
                            let written = insert_codes(&tx, &asked, id).await?;
                            pending.retain(|(_, code)| !written.contains(code));
                            if pending.is_empty() {
                                break;
                            }
                            // Taken by a voucher or another campaign: draw again in its range.
                            for (i, code) in pending.iter_mut() {
                                *code = pattern.draw(&mut rng, *i);
                            }
                        }
                        if !pending.is_empty() {
                            return Ok(CampaignCreated::CodesExhausted(pending.len() as u64));
                        }
                        start = end;
                    }
                }
            }
            let count = c.codes.count() as i64;
            tx.query_typed(
                "UPDATE campaign SET code_count = $2 WHERE id = $1",
                &[(&id, Type::INT8), (&count, Type::INT8)],
            )
            .await
            .map_err(StoreError::from)?;
            let row = tx
                .query_typed(
                    &format!("{CAMPAIGN_VIEW} WHERE g.id = $1"),
                    &[(&id, Type::INT8)],
                )
                .await
                .map_err(StoreError::from)?;
            let view = campaign_view(row.first().ok_or(StoreError::NoRow)?);
            tx.commit().await.map_err(StoreError::from)?;
            Ok(CampaignCreated::Created(Box::new(view)))
        })
        .await
    }

    /// The campaign's view, and in the same snapshot how many of `orders` (code, orderId) have
    /// their rows (mode B: the orders its gate had in flight, read before). None: no such
    /// campaign.
    pub async fn campaign(
        &self,
        id: i64,
        orders: &[(String, String)],
    ) -> Result<Option<(CampaignView, usize)>, StoreError> {
        timed(Dependency::Postgres, "campaign", async {
            let (codes, order_ids): (Vec<&str>, Vec<&str>) =
                orders.iter().map(|(c, o)| (c.as_str(), o.as_str())).unzip();
            let rows = self
                .client()
                .await?
                .query_typed(
                    &format!(
                        "SELECT view.*,
                                (SELECT count(*) FROM redemption r
                                  WHERE (r.voucher_code, r.order_id) IN
                                        (SELECT * FROM unnest($2::text[], $3::text[]))) AS landed
                           FROM ({CAMPAIGN_VIEW} WHERE g.id = $1) view"
                    ),
                    &[
                        (&id, Type::INT8),
                        (&codes, Type::TEXT_ARRAY),
                        (&order_ids, Type::TEXT_ARRAY),
                    ],
                )
                .await
                .map_err(StoreError::from)?;
            Ok(rows
                .first()
                .map(|row| (campaign_view(row), row.get::<_, i64>("landed") as usize)))
        })
        .await
    }

    /// A page of campaigns in id order.
    pub async fn campaigns(&self, list: &CampaignList) -> Result<Page<CampaignView>, StoreError> {
        timed(Dependency::Postgres, "campaigns", async {
            let rows = self
                .client()
                .await?
                .query_typed(
                    &format!(
                        "{CAMPAIGN_VIEW} WHERE ($1::int8 IS NULL OR g.id > $1)
                          ORDER BY g.id LIMIT $2"
                    ),
                    &[(&list.after, Type::INT8), (&(list.limit + 1), Type::INT8)],
                )
                .await
                .map_err(StoreError::from)?;
            let mut items: Vec<CampaignView> = rows.iter().map(campaign_view).collect();
            let next = page_next(&mut items, list.limit, |c| CampaignList::cursor(c.id));
            Ok(Page { items, next })
        })
        .await
    }

    pub async fn patch_campaign(
        &self,
        id: i64,
        p: &CampaignPatch,
    ) -> Result<CampaignPatched, StoreError> {
        timed(Dependency::Postgres, "patch_campaign", async {
            // The rules and the name and metadata in one transaction: a refusal of either
            // writes neither.
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let total = p.total_limit.flatten();
            let per_user = p.per_user_limit.flatten();
            let budget = p.budget_amount.flatten();
            let result = tx
                .query_typed(
                    "SELECT fg_patch_campaign($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                    &[
                        (&id, Type::INT8),
                        (&p.active, Type::BOOL),
                        (&p.starts_at, Type::TIMESTAMPTZ),
                        (&p.ends_at, Type::TIMESTAMPTZ),
                        (&total, Type::INT8),
                        (&(p.total_limit == Some(None)), Type::BOOL),
                        (&per_user, Type::INT4),
                        (&(p.per_user_limit == Some(None)), Type::BOOL),
                        (&budget, Type::INT8),
                        (&(p.budget_amount == Some(None)), Type::BOOL),
                    ],
                )
                .await;
            let rows = match result {
                Ok(rows) => rows,
                Err(e) => {
                    if let Some(db) = e.as_db_error() {
                        let detail = db.detail().unwrap_or_default().to_owned();
                        match (db.code().code(), db.message()) {
                            ("FG409", "LIMIT_BELOW_USED") => {
                                return Ok(CampaignPatched::LimitBelowUsed(detail))
                            }
                            ("FG409", "BUDGET_BELOW_USED") => {
                                return Ok(CampaignPatched::BudgetBelowUsed(detail))
                            }
                            ("FG422", "WINDOW") => {
                                return Ok(CampaignPatched::WindowInverted(detail))
                            }
                            _ => {}
                        }
                    }
                    return Err(e.into());
                }
            };
            let outcome: String = rows.first().ok_or(StoreError::NoRow)?.get(0);
            if outcome == "NOT_FOUND" {
                return Ok(CampaignPatched::NotFound);
            }
            match describe_in(&*tx, Described::Campaign(id), &p.description).await? {
                DescribeOutcome::Applied => tx.commit().await?,
                DescribeOutcome::NotFound => return Ok(CampaignPatched::NotFound),
                DescribeOutcome::TooManyKeys => return Ok(CampaignPatched::TooManyKeys),
            }
            let rows = client
                .query_typed(
                    &format!("{CAMPAIGN_VIEW} WHERE g.id = $1"),
                    &[(&id, Type::INT8)],
                )
                .await
                .map_err(StoreError::from)?;
            Ok(rows.first().map_or(CampaignPatched::NotFound, |row| {
                CampaignPatched::Patched(Box::new(campaign_view(row)))
            }))
        })
        .await
    }
}

/// Writes one chunk of a campaign's codes; the codes written (an existing one is not).
async fn insert_codes(
    tx: &deadpool_postgres::Transaction<'_>,
    codes: &[&str],
    id: i64,
) -> Result<HashSet<String>, StoreError> {
    let rows = tx
        .query_typed(
            INSERT_CODES,
            &[(&codes, Type::TEXT_ARRAY), (&id, Type::INT8)],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get::<_, String>(0)).collect())
}
