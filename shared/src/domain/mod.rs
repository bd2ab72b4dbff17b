//! The domain: validated identifiers, amounts, the reservation status lattice and the views the
//! API returns. Nothing here does I/O, so the rules are unit-tested without a database.
//!
//! One file per concept, each with its tests; everything is re-exported here, so callers name
//! `domain::X` and never the file:
//!
//! - `invalid`: [`Invalid`], the error every rule returns, naming the field at fault.
//! - `ids`: [`VoucherCode`], [`OrderId`], [`customer_id`].
//! - `amounts`: [`amount`] and [`MAX_AMOUNT`], money in minor units.
//! - `time`: [`rfc3339`] and [`millis`], the one precision instants are kept and printed at.
//! - `status`: the lattice [`Status`] (`RESERVED < CONFIRMED < RELEASED`), [`active_delta`],
//!   [`ReleaseReason`].
//! - `outcome`: [`ReserveOutcome`], the reserve vocabulary shared with Lua and SQL, and
//!   [`Held`], a use as it is held.
//! - `discount`: [`Discount`], fixed or a capped percentage.
//! - `grant`: [`GrantRules`], one version of a voucher's rules, and the [`Claim`] of a mode-B
//!   event checked against them.
//! - `voucher`: creating a voucher: [`CreateVoucherRequest`], its limits, [`VoucherRules`] and
//!   [`NewVoucher`].
//! - `campaign`: campaigns of unique codes: [`CreateCampaignRequest`], [`NewCampaign`],
//!   [`CampaignPatch`], [`CampaignView`]; `codes`: the codes a campaign generates
//!   ([`CodePattern`]) or imports ([`NewCodes`]).
//! - `patch`: changing one: [`PatchVoucherRequest`] and [`VoucherPatch`].
//! - `requests`: the bodies about one order, [`ReserveRequest`] and [`ValidateRequest`], and the
//!   checked [`Reserve`] and [`Validate`] they become.
//! - `views`: the JSON answers: [`VoucherView`], [`Reservation`], [`ReservationView`],
//!   [`ReservationItem`], [`Confirmation`], [`Eligibility`].
//! - `listing`: the listings' queries, cursors and [`Page`].
//! - `order`: orders of several codes: [`OrderRequest`], [`NewOrder`], the [`stacking`] order
//!   of their discounts, [`OrderView`].
//!
//! The gate's copy of a voucher's rules, `GateMeta`, names Redis fields and so lives in `gate`.

mod amounts;
mod campaign;
mod codes;
mod description;
mod discount;
mod grant;
mod ids;
mod invalid;
mod listing;
mod order;
mod outcome;
mod patch;
mod requests;
pub mod schema;
mod status;
mod time;
mod views;
mod voucher;

pub use amounts::{amount, MAX_AMOUNT};
pub use campaign::{
    campaign_id, campaign_key, CampaignPatch, CampaignRules, CampaignView, CodeItem,
    CreateCampaignRequest, NewCampaign, PatchCampaignRequest, CAMPAIGN_BODY_LIMIT,
};
pub use codes::{CodePattern, CodeRng, NewCodes, DEFAULT_CHARSET, MAX_GENERATED, MAX_IMPORTED};
pub use description::{Description, Metadata, MAX_METADATA_KEYS};
pub use discount::Discount;
pub use grant::{Claim, GrantRules};
pub use ids::{customer_id, OrderId, VoucherCode};
pub use invalid::Invalid;
pub use listing::{
    CampaignList, CampaignListQuery, CodeList, CodeListQuery, CodeStatus, Page, ReservationList,
    ReservationListQuery, VoucherList, VoucherListQuery, DEFAULT_PAGE, MAX_PAGE,
};
pub use order::{stacking, NewOrder, OrderItem, OrderRequest, OrderView, MAX_ORDER_CODES};
pub use outcome::{Held, ReserveOutcome};
pub use patch::{PatchVoucherRequest, VoucherPatch};
pub use requests::{Reserve, ReserveRequest, Validate, ValidateRequest};
pub use status::{active_delta, ReleaseReason, Status};
pub use time::{instant, instant_ms, millis, rfc3339};
pub use views::{
    Budget, Confirmation, Eligibility, Reservation, ReservationItem, ReservationView, VoucherView,
};
pub use voucher::{
    counter_slots_for, flash_budget, CreateVoucherRequest, NewVoucher, VoucherRules,
    AUTO_COUNTER_SLOTS, DEFAULT_TTL_SECONDS, MAX_COUNTER_SLOTS, MAX_TOTAL_LIMIT, MAX_TTL_SECONDS,
};
