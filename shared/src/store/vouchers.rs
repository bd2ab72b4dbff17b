//! Vouchers: creating one, reading one or a page of them, changing their rules.

use tokio_postgres::{error::SqlState, types::Type};

use super::descriptions::{describe_in, DescribeOutcome, Described};
use super::rows::{page_next, voucher_rules};
use super::Store;
use super::StoreError;
use crate::domain::{
    Budget, Description, Discount, NewVoucher, Page, VoucherCode, VoucherList, VoucherRules,
    VoucherView,
};
use crate::telemetry::metrics::{timed, Dependency};

/// The facts about a voucher that never change after creation, cached by each process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VoucherKind {
    pub flash_sale: bool,
    /// Never combined with another code in one order (its own flag or its campaign's).
    pub exclusive: bool,
    /// The campaign whose code it is.
    pub campaign_id: Option<i64>,
}

impl VoucherKind {
    /// The flash-sale campaign whose gate decides this code (None: a voucher, or a standard
    /// campaign's code).
    pub fn flash_campaign(&self) -> Option<i64> {
        self.campaign_id.filter(|_| self.flash_sale)
    }
}

/// A voucher as a change to it starts from: its rules and the version they are at.
#[derive(Debug, Clone)]
pub struct VoucherState {
    pub rules: VoucherRules,
    pub version: i64,
    pub reservation_ttl_seconds: i32,
    pub counter_slots: i16,
}

/// What `fg_patch_voucher` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOutcome {
    /// Written; the voucher's new version.
    Applied(i64),
    /// Another change landed since the version given, or Postgres broke a deadlock with a batch
    /// of reserves by rolling this change back: nothing written, read again and retry.
    Stale,
    NotFound,
    /// The uses held exceed the new limit: nothing written. Postgres' detail.
    LimitBelowUsed(String),
    /// A slot the change would remove still counts something: nothing written. Postgres'
    /// detail.
    SlotsInUse(String),
    /// The discounts held exceed the new budget: nothing written. Postgres' detail.
    BudgetBelowUsed(String),
    /// The metadata's merge would leave too many keys: nothing written.
    TooManyKeys,
}

/// The voucher view's columns, for one voucher or a page of them. The counts are the counters
/// `fg_merge` keeps on the voucher's slots (at most 64 rows), so a view costs the same after a
/// million uses as after none.
///
/// A campaign's code shows its campaign's window and pause, which are the ones that count, and
/// is flash-sale when its campaign is (its own row says false).
const VOUCHER_VIEW: &str = "
    SELECT v.code, v.discount_amount, v.discount_percent, v.max_discount_amount,
           v.min_order_amount, v.total_limit, v.per_user_limit,
           COALESCE(g.starts_at, v.starts_at) AS starts_at,
           COALESCE(g.ends_at, v.ends_at) AS ends_at,
           v.flash_sale OR COALESCE(g.flash_sale, false) AS flash_sale,
           v.exclusive OR COALESCE(g.exclusive, false) AS exclusive,
           COALESCE(g.active, v.active) AS active, v.reservation_ttl_seconds,
           v.counter_slots, v.campaign_id, v.name, v.metadata::text AS metadata,
           n.used, n.used - n.confirmed AS reserved, n.confirmed, n.revoked,
           b.amount AS budget_amount, b.used AS budget_used
      FROM voucher v
      LEFT JOIN voucher_budget b ON b.voucher_code = v.code
      LEFT JOIN campaign g ON g.id = v.campaign_id
     CROSS JOIN LATERAL (
           SELECT COALESCE(sum(s.used), 0)::int8 AS used,
                  COALESCE(sum(s.confirmed), 0)::int8 AS confirmed,
                  COALESCE(sum(s.revoked), 0)::int8 AS revoked
             FROM voucher_slot s WHERE s.voucher_code = v.code) n";

fn voucher_view(row: &tokio_postgres::Row) -> VoucherView {
    let discount = Discount::from_columns(
        row.get("discount_amount"),
        row.get("discount_percent"),
        row.get("max_discount_amount"),
    );
    let (discount_amount, discount_percent, max_discount_amount) = discount.columns();
    let total: i64 = row.get::<_, i32>("total_limit").into();
    let used: i64 = row.get("used");
    let budget_amount: Option<i64> = row.get("budget_amount");
    let budget_used: Option<i64> = row.get("budget_used");
    VoucherView {
        code: row.get("code"),
        discount_amount,
        discount_percent,
        max_discount_amount,
        min_order_amount: row.get("min_order_amount"),
        total_limit: total,
        per_user_limit: row.get::<_, i32>("per_user_limit").into(),
        starts_at: row.get("starts_at"),
        ends_at: row.get("ends_at"),
        flash_sale: row.get("flash_sale"),
        exclusive: row.get("exclusive"),
        active: row.get("active"),
        reservation_ttl_seconds: row.get::<_, i32>("reservation_ttl_seconds").into(),
        counter_slots: row.get::<_, i16>("counter_slots").into(),
        used_count: used,
        remaining: total - used,
        reserved_count: row.get("reserved"),
        confirmed_count: row.get("confirmed"),
        revoked_count: row.get("revoked"),
        in_flight_count: 0,
        budget: budget_amount.map(|amount| Budget::of(amount, budget_used.unwrap_or(0))),
        campaign_id: row.get("campaign_id"),
        name: row.get("name"),
        metadata: super::descriptions::metadata_of(row).unwrap_or_default(),
    }
}

impl Store {
    /// The new voucher's view; None: the code is taken (a voucher's or a campaign's), and
    /// nothing was written.
    pub async fn create_voucher(&self, v: &NewVoucher) -> Result<Option<VoucherView>, StoreError> {
        timed(Dependency::Postgres, "create_voucher", async {
            let client = self.client().await?;
            let r = &v.rules;
            let (amount, percent, cap) = r.discount.columns();
            let metadata = serde_json::to_string(&v.metadata).expect("strings serialise");
            // One statement, so one transaction: the voucher, its slots and its budget commit
            // together, and the caps' sum is checked at that commit.
            let rows = client
                .query_typed(
                    "WITH v AS (
                       INSERT INTO voucher (code, discount_amount, discount_percent,
                                            max_discount_amount, min_order_amount, total_limit,
                                            per_user_limit, starts_at, ends_at, flash_sale, active,
                                            reservation_ttl_seconds, counter_slots, name,
                                            metadata, exclusive)
                       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $15,
                               $16::jsonb, $17)
                       ON CONFLICT (code) DO NOTHING
                       RETURNING code, total_limit, counter_slots),
                     b AS (
                       INSERT INTO voucher_budget (voucher_code, amount)
                       SELECT v.code, $14 FROM v WHERE $14::int8 IS NOT NULL)
                     SELECT v.code, fg_set_slots(v.code, v.total_limit, v.counter_slots) FROM v",
                    &[
                        (&v.code.as_str(), Type::TEXT),
                        (&amount, Type::INT8),
                        (&percent, Type::INT2),
                        (&cap, Type::INT8),
                        (&r.min_order_amount, Type::INT8),
                        (&r.total_limit, Type::INT4),
                        (&r.per_user_limit, Type::INT4),
                        (&r.starts_at, Type::TIMESTAMPTZ),
                        (&r.ends_at, Type::TIMESTAMPTZ),
                        (&v.flash_sale, Type::BOOL),
                        (&r.active, Type::BOOL),
                        (&v.reservation_ttl_seconds, Type::INT4),
                        (&v.counter_slots, Type::INT2),
                        (&r.budget_amount, Type::INT8),
                        (&v.name, Type::TEXT),
                        (&metadata, Type::TEXT),
                        (&v.exclusive, Type::BOOL),
                    ],
                )
                .await?;
            if rows.is_empty() {
                return Ok(None);
            }
            Ok(Some(VoucherView {
                code: v.code.as_str().to_owned(),
                discount_amount: amount,
                discount_percent: percent,
                max_discount_amount: cap,
                min_order_amount: r.min_order_amount,
                total_limit: r.total_limit.into(),
                per_user_limit: r.per_user_limit.into(),
                starts_at: r.starts_at,
                ends_at: r.ends_at,
                flash_sale: v.flash_sale,
                exclusive: v.exclusive,
                active: r.active,
                reservation_ttl_seconds: v.reservation_ttl_seconds.into(),
                counter_slots: v.counter_slots.into(),
                used_count: 0,
                remaining: r.total_limit.into(),
                reserved_count: 0,
                confirmed_count: 0,
                revoked_count: 0,
                in_flight_count: 0,
                budget: r.budget_amount.map(|amount| Budget::of(amount, 0)),
                campaign_id: None,
                name: v.name.clone(),
                metadata: v.metadata.clone(),
            }))
        })
        .await
    }

    /// None: no such voucher.
    pub async fn voucher(&self, code: &VoucherCode) -> Result<Option<VoucherView>, StoreError> {
        Ok(self
            .voucher_and_landed(code, &[])
            .await?
            .map(|(view, _)| view))
    }

    /// The voucher's view and how many of `order_ids` Postgres holds, read in one snapshot
    /// (one statement): mode B's view counts the gate's pending orders Postgres does not hold
    /// yet, and an event that lands between two reads would be counted twice or not at all.
    /// None: no such voucher.
    pub async fn voucher_and_landed(
        &self,
        code: &VoucherCode,
        order_ids: &[&str],
    ) -> Result<Option<(VoucherView, usize)>, StoreError> {
        timed(Dependency::Postgres, "voucher", async {
            let client = self.client().await?;
            let rows = client
                .query_typed(
                    &format!(
                        "SELECT view.*,
                                (SELECT count(*) FROM redemption r
                                  WHERE r.voucher_code = $1 AND r.order_id = ANY($2)) AS landed
                           FROM ({VOUCHER_VIEW} WHERE v.code = $1) view"
                    ),
                    &[(&code.as_str(), Type::TEXT), (&order_ids, Type::TEXT_ARRAY)],
                )
                .await?;
            Ok(rows.first().map(|row| {
                let landed: i64 = row.get("landed");
                (voucher_view(row), landed as usize)
            }))
        })
        .await
    }

    /// A page of vouchers in code order (keyset: the page after `list.after`). Campaigns' codes
    /// are listed by campaign, not here.
    pub async fn vouchers(&self, list: &VoucherList) -> Result<Page<VoucherView>, StoreError> {
        timed(Dependency::Postgres, "vouchers", async {
            let after = list.after.as_ref().map(VoucherCode::as_str);
            // One more than the page, to know whether a page follows.
            let rows = self
                .client()
                .await?
                .query_typed(
                    &format!(
                        "{VOUCHER_VIEW} WHERE v.campaign_id IS NULL
                            AND ($1::text IS NULL OR v.code > $1)
                          ORDER BY v.code LIMIT $2"
                    ),
                    &[(&after, Type::TEXT), (&(list.limit + 1), Type::INT8)],
                )
                .await
                .map_err(StoreError::from)?;
            let mut items: Vec<VoucherView> = rows.iter().map(voucher_view).collect();
            let next = page_next(&mut items, list.limit, |v| VoucherList::cursor(&v.code));
            Ok(Page { items, next })
        })
        .await
    }

    /// The voucher's rules and version, as a change starts from (None: no such voucher).
    pub async fn voucher_state(
        &self,
        code: &VoucherCode,
    ) -> Result<Option<VoucherState>, StoreError> {
        timed(Dependency::Postgres, "voucher_state", async {
            let rows = self
                .client()
                .await?
                .query_typed(
                    "SELECT v.discount_amount, v.discount_percent, v.max_discount_amount,
                            v.min_order_amount, v.total_limit, v.per_user_limit, v.starts_at,
                            v.ends_at, v.active, v.version, v.reservation_ttl_seconds,
                            v.counter_slots, b.amount AS budget_amount
                       FROM voucher v LEFT JOIN voucher_budget b ON b.voucher_code = v.code
                      WHERE v.code = $1",
                    &[(&code.as_str(), Type::TEXT)],
                )
                .await?;
            Ok(rows.first().map(|row| VoucherState {
                rules: voucher_rules(row),
                version: row.get("version"),
                reservation_ttl_seconds: row.get("reservation_ttl_seconds"),
                counter_slots: row.get("counter_slots"),
            }))
        })
        .await
    }

    /// Writes `rules` as the voucher's, and `slots` as its counter slots when given, if it is
    /// still at `version` (`fg_patch_voucher`, one round trip and one transaction).
    pub async fn patch_voucher(
        &self,
        code: &VoucherCode,
        version: i64,
        rules: &VoucherRules,
        slots: Option<i16>,
        description: &Description,
    ) -> Result<PatchOutcome, StoreError> {
        timed(Dependency::Postgres, "patch_voucher", async {
            let (amount, percent, cap) = rules.discount.columns();
            // The rules and the name and metadata in one transaction: a refusal of either
            // writes neither.
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let result = tx
                .query_typed(
                    "SELECT outcome, version
                       FROM fg_patch_voucher($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                                             $13)",
                    &[
                        (&code.as_str(), Type::TEXT),
                        (&version, Type::INT8),
                        (&amount, Type::INT8),
                        (&percent, Type::INT2),
                        (&cap, Type::INT8),
                        (&rules.min_order_amount, Type::INT8),
                        (&rules.total_limit, Type::INT4),
                        (&rules.per_user_limit, Type::INT4),
                        (&rules.starts_at, Type::TIMESTAMPTZ),
                        (&rules.ends_at, Type::TIMESTAMPTZ),
                        (&rules.active, Type::BOOL),
                        (&slots, Type::INT2),
                        (&rules.budget_amount, Type::INT8),
                    ],
                )
                .await;
            let rows = match result {
                Ok(rows) => rows,
                Err(e) => {
                    if let Some(db) = e.as_db_error() {
                        let detail = || db.detail().unwrap_or_default().to_owned();
                        match (db.code().code(), db.message()) {
                            ("FG409", "LIMIT_BELOW_USED") => {
                                return Ok(PatchOutcome::LimitBelowUsed(detail()))
                            }
                            ("FG409", "SLOTS_IN_USE") => {
                                return Ok(PatchOutcome::SlotsInUse(detail()))
                            }
                            ("FG409", "BUDGET_BELOW_USED") => {
                                return Ok(PatchOutcome::BudgetBelowUsed(detail()))
                            }
                            _ => {}
                        }
                        // Resizing locks every slot in slot order; a batch of reserves that holds
                        // one slot and then waits for all (near sold out) can meet it head on.
                        if db.code() == &SqlState::T_R_DEADLOCK_DETECTED {
                            return Ok(PatchOutcome::Stale);
                        }
                    }
                    return Err(e.into());
                }
            };
            let row = rows.first().ok_or(StoreError::NoRow)?;
            let outcome: &str = row.get("outcome");
            let outcome = match outcome {
                "APPLIED" => PatchOutcome::Applied(row.get("version")),
                "STALE" => PatchOutcome::Stale,
                "NOT_FOUND" => PatchOutcome::NotFound,
                other => return Err(StoreError::UnexpectedOutcome(other.to_owned())),
            };
            if let PatchOutcome::Applied(_) = outcome {
                let described = describe_in(&*tx, Described::Voucher(code), description).await?;
                if described == DescribeOutcome::TooManyKeys {
                    return Ok(PatchOutcome::TooManyKeys);
                }
                tx.commit().await?;
            }
            Ok(outcome)
        })
        .await
    }

    /// How a voucher is decided (None: no such voucher). Immutable once created.
    pub async fn kind(&self, code: &VoucherCode) -> Result<Option<VoucherKind>, StoreError> {
        timed(Dependency::Postgres, "kind", async {
            let rows = self
                .client()
                .await?
                .query_typed(
                    // A flash-sale campaign's codes are flash-sale: their rows say not (they
                    // are none of the per-voucher sweeps' business), their campaign says so.
                    "SELECT v.flash_sale OR COALESCE((SELECT g.flash_sale FROM campaign g
                                                       WHERE g.id = v.campaign_id), false),
                            v.campaign_id,
                            v.exclusive OR COALESCE((SELECT g.exclusive FROM campaign g
                                                      WHERE g.id = v.campaign_id), false)
                       FROM voucher v WHERE v.code = $1",
                    &[(&code.as_str(), Type::TEXT)],
                )
                .await?;
            Ok(rows.first().map(|r| VoucherKind {
                flash_sale: r.get(0),
                campaign_id: r.get(1),
                exclusive: r.get(2),
            }))
        })
        .await
    }
}
