-- Provider accounts and routes (docs/routing.md). An account is one place
-- charges can be sent: a provider's kind, its endpoint, and the names of
-- the environment variables its credentials are read from in each process
-- (never the credentials themselves). A tenant's route orders accounts, each
-- with an optional rule by currency and amount; a tenant without a route
-- sends every charge to the processes' own provider, as before accounts
-- existed. The names of the processes' own providers are reserved.
CREATE TABLE provider_accounts (
    name               text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_-]{0,39}$'
                           AND name NOT IN ('fake', 'fakepsp', 'stripe', 'adyen')),
    kind               text NOT NULL CHECK (kind IN ('fake', 'stripe', 'adyen')),
    endpoint           text NOT NULL CHECK (endpoint ~ '^https?://[^[:space:]]+$' AND length(endpoint) <= 2048),
    credential_env     text CHECK (credential_env ~ '^[A-Z][A-Z0-9_]{0,127}$'),
    webhook_secret_env text CHECK (webhook_secret_env ~ '^[A-Z][A-Z0-9_]{0,127}$'),
    merchant_account   text CHECK (merchant_account ~ '^[A-Za-z0-9_.-]{1,100}$'),
    created_at         timestamptz NOT NULL DEFAULT now(),
    disabled_at        timestamptz,
    CONSTRAINT provider_accounts_credentials CHECK (kind = 'fake' OR credential_env IS NOT NULL),
    CONSTRAINT provider_accounts_adyen_merchant CHECK (kind <> 'adyen' OR merchant_account IS NOT NULL)
);

CREATE TABLE tenant_routes (
    tenant_id  text NOT NULL REFERENCES tenants (id),
    position   integer NOT NULL CHECK (position BETWEEN 1 AND 16),
    account    text NOT NULL REFERENCES provider_accounts (name),
    -- The entry takes a charge whose currency is one of these (NULL: any)
    -- and whose amount is within [min_amount, max_amount] (NULL: no bound).
    currencies text[] CHECK (currencies IS NULL OR (cardinality(currencies) BETWEEN 1 AND 32
                                 AND array_to_string(currencies, ',') ~ '^[A-Z]{3}(,[A-Z]{3})*$')),
    min_amount bigint CHECK (min_amount > 0),
    max_amount bigint CHECK (max_amount > 0 AND max_amount >= coalesce(min_amount, 1)),
    PRIMARY KEY (tenant_id, position),
    UNIQUE (tenant_id, account)
);

-- A charge that moves to another account of its route gets that account's
-- own provider key: "cf_" and its id, then "_" and the number of the move.
-- charges_guard lets provider, provider_key and route_seq change together,
-- by one, only while the charge is pending (proven not held where it was).
ALTER TABLE charges ADD COLUMN route_seq integer NOT NULL DEFAULT 0 CHECK (route_seq BETWEEN 0 AND 16);
ALTER TABLE charges DROP CONSTRAINT charges_provider_key_of_id;
ALTER TABLE charges ADD CONSTRAINT charges_provider_key_of_id
    CHECK (provider_key = 'cf_' || id || CASE WHEN route_seq = 0 THEN '' ELSE '_' || route_seq END);
