//! Campaigns of unique codes: what the operators' routes call. A campaign's codes are vouchers
//! (reserve, confirm and release with one go through the rest of this service unchanged); the
//! campaign's limits and budget are kept by Postgres with the codes' own (docs/ARCHITECTURE.md,
//! "Campaigns").

use futures::Stream;

use super::Reservations;
use crate::domain::{
    CampaignList, CampaignPatch, CampaignView, CodeItem, CodeList, NewCampaign, Page,
};
use crate::errors::{CampaignError, CreateCampaignError, StoreError};

impl Reservations {
    pub async fn create_campaign(
        &self,
        c: &NewCampaign,
    ) -> Result<CampaignView, CreateCampaignError> {
        self.store.create_campaign(c).await
    }

    pub async fn campaign(&self, id: i64) -> Result<CampaignView, CampaignError> {
        self.store.campaign(id).await
    }

    pub async fn campaigns(
        &self,
        list: &CampaignList,
    ) -> Result<Page<CampaignView>, CampaignError> {
        self.store.campaigns(list).await
    }

    pub async fn campaign_codes(&self, list: &CodeList) -> Result<Page<CodeItem>, CampaignError> {
        self.store.campaign_codes(list).await
    }

    /// The whole listing from `list.after` on, read as it is sent (the CSV download).
    pub async fn campaign_codes_stream(
        &self,
        list: &CodeList,
    ) -> Result<impl Stream<Item = Result<CodeItem, StoreError>> + Send + 'static, CampaignError>
    {
        self.store.campaign_codes_stream(list).await
    }

    pub async fn patch_campaign(
        &self,
        id: i64,
        patch: &CampaignPatch,
    ) -> Result<CampaignView, CampaignError> {
        self.store.patch_campaign(id, patch).await
    }
}
