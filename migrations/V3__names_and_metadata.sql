-- A name and free-form metadata on vouchers and campaigns: what the operator calls them and
-- the keys their own systems put on them. Every view shows them, PATCH changes them (metadata
-- merged key by key), nothing on the reserve path reads them. A campaign's codes carry none of
-- their own. The number of keys is checked here, where a PATCH's merge lands; the keys' and
-- values' lengths, and the name's, where the request is parsed (domain/description.rs), the
-- name's also here.
ALTER TABLE voucher
    ADD COLUMN name text CONSTRAINT voucher_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}'
        CONSTRAINT voucher_metadata_keys CHECK (
            jsonb_typeof(metadata) = 'object'
            AND jsonb_array_length(jsonb_path_query_array(metadata, '$.keyvalue()')) <= 50);

ALTER TABLE campaign
    ADD COLUMN name text CONSTRAINT campaign_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}'
        CONSTRAINT campaign_metadata_keys CHECK (
            jsonb_typeof(metadata) = 'object'
            AND jsonb_array_length(jsonb_path_query_array(metadata, '$.keyvalue()')) <= 50);
