//! A campaign's codes, listed: a page at a time, or every code from a point on as a stream of
//! rows read as they are sent (the CSV download).

use futures::{Stream, StreamExt as _};
use tokio_postgres::types::{ToSql, Type};

use super::rows::page_next;
use super::Store;
use super::StoreError;
use crate::domain::{CodeItem, CodeList, CodeStatus, Page, VoucherCode};
use crate::telemetry::metrics::{timed, Dependency};

/// The codes listing: a campaign's codes in code order, with their active uses (one slot each).
const CODES: &str = "
    SELECT v.code, s.used::int8 AS used
      FROM voucher v JOIN voucher_slot s ON s.voucher_code = v.code AND s.slot = 0
     WHERE v.campaign_id = $1 AND ($2::text IS NULL OR v.code > $2)
       AND ($3::bool IS NULL OR (s.used > 0) = $3)
     ORDER BY v.code";

impl Store {
    async fn campaign_exists(
        &self,
        client: &deadpool_postgres::Client,
        id: i64,
    ) -> Result<bool, StoreError> {
        let rows = client
            .query_typed("SELECT 1 FROM campaign WHERE id = $1", &[(&id, Type::INT8)])
            .await?;
        Ok(!rows.is_empty())
    }

    /// A page of a campaign's codes in code order. None: no such campaign.
    pub async fn campaign_codes(
        &self,
        list: &CodeList,
    ) -> Result<Option<Page<CodeItem>>, StoreError> {
        timed(Dependency::Postgres, "campaign_codes", async {
            let client = self.client().await?;
            if !self.campaign_exists(&client, list.campaign).await? {
                return Ok(None);
            }
            let after = list.after.as_ref().map(VoucherCode::as_str);
            let used = list.status.map(|s| s == CodeStatus::Used);
            let rows = client
                .query_typed(
                    &format!("{CODES} LIMIT $4"),
                    &[
                        (&list.campaign, Type::INT8),
                        (&after, Type::TEXT),
                        (&used, Type::BOOL),
                        (&(list.limit + 1), Type::INT8),
                    ],
                )
                .await
                .map_err(StoreError::from)?;
            let mut items: Vec<CodeItem> = rows.iter().map(code_item).collect();
            let next = page_next(&mut items, list.limit, |c| CodeList::cursor(&c.code));
            Ok(Some(Page { items, next }))
        })
        .await
    }

    /// Every code of the listing from `list.after` on, as a stream of rows read from Postgres
    /// as they are sent: a million codes never sit in memory at once. (`list.limit` is ignored.)
    /// None: no such campaign.
    pub async fn campaign_codes_stream(
        &self,
        list: &CodeList,
    ) -> Result<Option<impl Stream<Item = Result<CodeItem, StoreError>> + Send + 'static>, StoreError>
    {
        let client = self.client().await?;
        if !self.campaign_exists(&client, list.campaign).await? {
            return Ok(None);
        }
        let after = list.after.as_ref().map(|c| c.as_str().to_owned());
        let used = list.status.map(|s| s == CodeStatus::Used);
        let params: Vec<Box<dyn ToSql + Send + Sync>> =
            vec![Box::new(list.campaign), Box::new(after), Box::new(used)];
        Ok(Some(code_rows(client, params).await?))
    }
}

fn code_item(row: &tokio_postgres::Row) -> CodeItem {
    CodeItem {
        code: row.get("code"),
        used_count: row.get("used"),
    }
}

/// The codes query as a row stream that owns its pooled connection, so the stream can outlive
/// the handler that made it (the response body reads it).
async fn code_rows(
    client: deadpool_postgres::Client,
    params: Vec<Box<dyn ToSql + Send + Sync>>,
) -> Result<impl Stream<Item = Result<CodeItem, StoreError>> + Send + 'static, StoreError> {
    let rows = client
        .query_raw(
            CODES,
            params.iter().map(|p| p.as_ref() as &(dyn ToSql + Sync)),
        )
        .await?;
    // The client moves into the stream: it goes back to the pool when the stream is dropped.
    Ok(futures::stream::unfold(
        (client, Box::pin(rows)),
        |(client, mut rows)| async move {
            let next = rows.next().await?;
            Some((
                next.map(|r| code_item(&r)).map_err(StoreError::from),
                (client, rows),
            ))
        },
    ))
}
