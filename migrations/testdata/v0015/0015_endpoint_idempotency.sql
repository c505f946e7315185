-- Creating a webhook endpoint is idempotent as accepting a charge is
-- (docs/webhooks.md, "Endpoints"): the key's record, in the same table and
-- the same key space as charges' and refunds', names the endpoint its
-- request created, and a retry is answered from it. A record names a
-- charge (or refund) or an endpoint, never both, and each with its foreign
-- key, so neither can point at nothing.
--
-- No rewrite: the new column is NULL in every existing row, and dropping
-- NOT NULL only relaxes. The CHECK and the foreign key each read the table
-- once, as they are added.
ALTER TABLE idempotency_keys ADD COLUMN endpoint_id text;
ALTER TABLE idempotency_keys ALTER COLUMN charge_id DROP NOT NULL;
ALTER TABLE idempotency_keys
    ADD CONSTRAINT idempotency_keys_one_object CHECK (num_nonnulls(charge_id, endpoint_id) = 1),
    ADD CONSTRAINT idempotency_keys_endpoint_fkey FOREIGN KEY (tenant_id, endpoint_id)
        REFERENCES webhook_endpoints (tenant_id, id);
