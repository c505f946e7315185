-- The schema's tables as fifteen migrations of development left them,
-- before any release (migrations/testdata/v0015 keeps those for the upgrade
-- test). The functions and the triggers that call them are in
-- migrations/functions/, one file each, applied after this file.
--
-- Every primary key starts with tenant_id, but the audit trail's, so that
-- tenants can later be spread across databases without rewriting keys.
-- Invariants live in the schema as well as in Go (docs/architecture.md,
-- "Schema"). River's tables come first, from River's own migrations.

CREATE TABLE tenants (
    id         text PRIMARY KEY CHECK (id ~ '^tn_[0-9a-z]{26}$'),
    name       text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 200),
    -- Requests per second for this tenant; NULL means the server's default.
    rate_limit integer CHECK (rate_limit > 0),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    tenant_id   text NOT NULL REFERENCES tenants (id),
    id          text NOT NULL CHECK (id ~ '^key_[0-9a-z]{26}$'),
    -- sha256 of the key's secret part; the key itself is never stored.
    secret_hash bytea NOT NULL CHECK (length(secret_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    PRIMARY KEY (tenant_id, id)
);

-- The legal moves of the state machine of charges and refunds (intent/doc.go
-- draws it). charges_guard and charge_events_legal_move both read it.
CREATE TABLE charge_transitions (
    from_state text NOT NULL,
    to_state   text NOT NULL,
    PRIMARY KEY (from_state, to_state)
);

INSERT INTO charge_transitions (from_state, to_state) VALUES
    ('pending', 'submitting'),
    ('pending', 'failed'),
    ('submitting', 'succeeded'),
    ('submitting', 'failed'),
    ('submitting', 'unknown'),
    ('submitting', 'pending'),
    ('unknown', 'succeeded'),
    ('unknown', 'failed'),
    ('unknown', 'pending'),
    ('unknown', 'needs_review'),
    ('needs_review', 'succeeded'),
    ('needs_review', 'failed'),
    ('needs_review', 'pending');

-- Charges and refunds (docs/refunds.md, "Where refunds live"): a refund is a
-- row of kind 'refund' whose parent_id names the charge it refunds, so that
-- the state machine, the audit trail, the reconciler's lease and fencing and
-- every sweep apply to refunds by construction, not by a copy.
--
-- No foreign key to tenants: charges_guard checks the tenant once, without
-- a lock, when a charge is born, and tenants_kept keeps the tenant from
-- going (docs/architecture.md, "Writes per charge").
CREATE TABLE charges (
    tenant_id          text NOT NULL,
    id                 text NOT NULL CHECK (id ~ '^(ch|re)_[0-9a-z]{26}$'),
    state              text NOT NULL CHECK (state IN ('pending', 'submitting', 'unknown', 'succeeded', 'failed', 'needs_review')),
    amount             bigint NOT NULL CHECK (amount > 0),
    currency           text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    payment_method     text CHECK (length(payment_method) BETWEEN 1 AND 255),
    description        text,
    metadata           jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    -- Which provider the row goes to, and the idempotency key it is sent
    -- with: "cf_" and the row's id (intent.ProviderKeyFor), the same for
    -- every attempt. charges_guard keeps both from changing, so the primary
    -- key makes the key unique.
    provider           text NOT NULL CHECK (length(provider) BETWEEN 1 AND 64),
    provider_key       text NOT NULL CHECK (length(provider_key) BETWEEN 1 AND 255),
    provider_charge_id text,
    failure_code       text,
    review_reason      text,
    -- How many times the provider has been called for this row.
    attempts           integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- When the first call was sent (the provider's key window counts from
    -- here) and when the latest was (the settle window counts from here).
    first_attempt_at   timestamptz,
    last_attempt_at    timestamptz,
    -- Reconciler bookkeeping: when the outcome became unknown, how many
    -- lookups failed in a row, and when to look again.
    unknown_since      timestamptz,
    lookup_failures    integer NOT NULL DEFAULT 0 CHECK (lookup_failures >= 0),
    next_check_at      timestamptz,
    -- The reconciler's lease. lease_token grows on every lease and fences
    -- every write, so a reconciler whose lease expired writes nothing.
    lease_owner        text,
    lease_token        bigint NOT NULL DEFAULT 0,
    lease_expires_at   timestamptz,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    -- When any lookup last ran and when an operator last forced one: forced
    -- lookups are spaced by a floor, so a loop of reconcile requests cannot
    -- override the lookup backoff and hammer the provider.
    last_lookup_at     timestamptz,
    forced_check_at    timestamptz,
    kind               text NOT NULL DEFAULT 'charge' CHECK (kind IN ('charge', 'refund')),
    parent_id          text,
    reason             text CHECK (reason IN ('requested_by_customer', 'duplicate', 'fraudulent')),
    -- On a charge: the sum of its refunds that are not failed (reserved the
    -- moment a refund is accepted, by refunds_account) and of those that
    -- succeeded.
    amount_reserved    bigint NOT NULL DEFAULT 0,
    amount_refunded    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT charges_succeeded_has_provider_charge CHECK (state <> 'succeeded' OR provider_charge_id IS NOT NULL),
    CONSTRAINT charges_failed_has_code CHECK (state <> 'failed' OR failure_code IS NOT NULL),
    CONSTRAINT charges_review_has_reason CHECK (state <> 'needs_review' OR review_reason IS NOT NULL),
    CONSTRAINT charges_unknown_has_check CHECK (state <> 'unknown' OR (next_check_at IS NOT NULL AND unknown_since IS NOT NULL)),
    CONSTRAINT charges_kind_shape CHECK (
        (kind = 'charge' AND id LIKE 'ch\_%' AND parent_id IS NULL AND reason IS NULL AND payment_method IS NOT NULL)
        OR (kind = 'refund' AND id LIKE 're\_%' AND parent_id IS NOT NULL AND payment_method IS NULL
            AND amount_reserved = 0 AND amount_refunded = 0)),
    -- The refunds of a charge that are not failed never add up to more than
    -- it: refunds_account adds to amount_reserved under the charge's row
    -- lock, and this refuses the sum that would pass it.
    CONSTRAINT charges_refunds_within_amount
        CHECK (amount_refunded >= 0 AND amount_refunded <= amount_reserved AND amount_reserved <= amount),
    CONSTRAINT charges_provider_key_of_id CHECK (provider_key = 'cf_' || id),
    CONSTRAINT charges_parent FOREIGN KEY (tenant_id, parent_id) REFERENCES charges (tenant_id, id)
);

-- A tenant's listing by status, newest first, cursor on id.
CREATE INDEX charges_tenant_state_id ON charges (tenant_id, state, id);
-- The reconciler's two work queues, and the sweep of stranded pending rows
-- (a pending row whose charge.submit job River no longer intends to run).
CREATE INDEX charges_unknown_next_check ON charges (next_check_at) WHERE state = 'unknown';
CREATE INDEX charges_submitting_since ON charges (last_attempt_at) WHERE state = 'submitting';
CREATE INDEX charges_pending_since ON charges (updated_at) WHERE state = 'pending';
-- Operators find a row by its id alone (ids are unique across tenants: 80
-- random bits each), and list every tenant's rows in one state that is not
-- the majority's, newest first.
CREATE INDEX charges_id ON charges (id);
CREATE INDEX charges_needs_review_id ON charges (id) WHERE state = 'needs_review';
CREATE INDEX charges_failed_id ON charges (id) WHERE state = 'failed';
-- A charge's refunds.
CREATE INDEX charges_refunds_of ON charges (tenant_id, parent_id, id) WHERE parent_id IS NOT NULL;
-- The stranded-pending sweep asks River whether a charge's job still exists.
CREATE INDEX river_job_charge_submit_charge ON river_job ((args->>'charge_id')) WHERE kind = 'charge.submit';

-- The append-only audit trail (charge_events_append_only): one row per
-- move, written in the transaction of the move. The creation event has no
-- from_state, nor has an operator's action that moves nothing (a forced
-- lookup): `action` names it and to_state is the state the row stayed in.
-- The primary key starts with the charge, not the tenant: a charge's id is
-- unique on its own, and the key is the table's largest index.
CREATE TABLE charge_events (
    tenant_id   text NOT NULL,
    charge_id   text NOT NULL,
    id          bigint GENERATED ALWAYS AS IDENTITY,
    from_state  text,
    to_state    text NOT NULL,
    actor       text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    reason      text NOT NULL CHECK (length(reason) BETWEEN 1 AND 200),
    attempt     integer NOT NULL CHECK (attempt >= 0),
    evidence    text,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- The lease token a reconciler held when it wrote the event: a charge's
    -- reconciler events carry strictly increasing tokens, which the
    -- scenario runner checks, exposing a stale write past the fence.
    lease_token bigint,
    action      text CHECK (action IS NULL OR action ~ '^[a-z_]{1,64}$'),
    PRIMARY KEY (charge_id, id),
    FOREIGN KEY (tenant_id, charge_id) REFERENCES charges (tenant_id, id),
    CONSTRAINT charge_events_creation_is_pending CHECK (from_state IS NOT NULL OR to_state = 'pending' OR action IS NOT NULL)
);

-- An audit row names a legal move: a CHECK made from charge_transitions, so
-- that the table stays the one list, rather than a foreign key, which would
-- lock the move's row of it on every move. A migration that adds a
-- transition must remake this constraint.
DO $$
DECLARE
    moves text;
BEGIN
    SELECT string_agg(quote_literal(from_state || '>' || to_state), ', ' ORDER BY from_state, to_state)
        INTO moves FROM charge_transitions;
    EXECUTE format('ALTER TABLE charge_events ADD CONSTRAINT charge_events_legal_move
        CHECK (from_state IS NULL OR from_state || ''>'' || to_state IN (%s))', moves);
END
$$;

-- Webhook endpoints and their deliveries (docs/webhooks.md). A delivery is
-- decided with its event, in the transaction of the move (events_on_moves,
-- events_on_endpoint_disabled): one delivery row and one River job of kind
-- webhook.deliver per subscribed endpoint. The job carries it; the row is
-- its log.
CREATE TABLE webhook_endpoints (
    tenant_id       text NOT NULL REFERENCES tenants (id),
    id              text NOT NULL CHECK (id ~ '^we_[0-9a-hjkmnp-tv-z]{26}$'),
    url             text NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    -- Event types, or '*' for every type.
    events          text[] NOT NULL CHECK (cardinality(events) BETWEEN 1 AND 16),
    -- The signing secret, "whsec_" and base64: a delivery is signed with
    -- it, so it is kept, as any HMAC key must be; the API shows it once.
    secret          text NOT NULL CHECK (secret ~ '^whsec_[A-Za-z0-9+/=]{16,128}$'),
    -- Failed attempts since the last delivered one; an endpoint failing
    -- for long is disabled (disabled_at, disabled_reason).
    failures        integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
    last_success_at timestamptz,
    disabled_at     timestamptz,
    disabled_reason text,
    deleted_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

-- One row per (tenant, idempotency key): the fingerprint of the request that
-- first used the key and the response it got, written in the transaction
-- that created what it names: a charge or refund, or a webhook endpoint,
-- never both. Only a hash of the key is kept.
CREATE TABLE idempotency_keys (
    tenant_id     text NOT NULL,
    key_hash      bytea NOT NULL CHECK (length(key_hash) = 32),
    fingerprint   bytea NOT NULL CHECK (length(fingerprint) = 32),
    charge_id     text,
    status_code   smallint NOT NULL CHECK (status_code BETWEEN 200 AND 599),
    response_body bytea NOT NULL,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL CHECK (expires_at > created_at),
    endpoint_id   text,
    PRIMARY KEY (tenant_id, key_hash),
    FOREIGN KEY (tenant_id, charge_id) REFERENCES charges (tenant_id, id),
    CONSTRAINT idempotency_keys_one_object CHECK (num_nonnulls(charge_id, endpoint_id) = 1),
    CONSTRAINT idempotency_keys_endpoint_fkey FOREIGN KEY (tenant_id, endpoint_id) REFERENCES webhook_endpoints (tenant_id, id)
);

CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);

-- Events (docs/webhooks.md): what a merchant is told, written by a trigger
-- in the transaction of what causes it: a charge's or refund's move to
-- succeeded, failed or needs_review (events_on_moves), or an endpoint's
-- disabling (events_on_endpoint_disabled). The snapshot is the row as that
-- left it. object_id is the one reference; the generated columns split it
-- by the type so that each kind of object keeps its foreign key.
CREATE TABLE events (
    tenant_id   text NOT NULL,
    id          text NOT NULL CHECK (id ~ '^evt_[0-9a-hjkmnp-tv-z]{26}$'),
    type        text NOT NULL CHECK (type IN (
        'charge.succeeded', 'charge.failed', 'charge.needs_review',
        'refund.succeeded', 'refund.failed', 'refund.needs_review',
        'webhook_endpoint.disabled')),
    object_id   text NOT NULL,
    snapshot    jsonb NOT NULL CHECK (jsonb_typeof(snapshot) = 'object'),
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    charge_id   text GENERATED ALWAYS AS
        (CASE WHEN type NOT LIKE 'webhook\_endpoint.%' THEN object_id END) STORED,
    endpoint_id text GENERATED ALWAYS AS
        (CASE WHEN type LIKE 'webhook\_endpoint.%' THEN object_id END) STORED,
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT events_charge_fkey FOREIGN KEY (tenant_id, charge_id) REFERENCES charges (tenant_id, id),
    CONSTRAINT events_endpoint_fkey FOREIGN KEY (tenant_id, endpoint_id) REFERENCES webhook_endpoints (tenant_id, id)
);

-- A merchant's listing, newest first, optionally by type.
CREATE INDEX events_tenant_type_id ON events (tenant_id, type, id);

CREATE TABLE webhook_deliveries (
    tenant_id    text NOT NULL,
    event_id     text NOT NULL,
    endpoint_id  text NOT NULL,
    state        text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts     integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_status  integer,
    last_error   text,
    delivered_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, event_id, endpoint_id),
    FOREIGN KEY (tenant_id, event_id) REFERENCES events (tenant_id, id),
    FOREIGN KEY (tenant_id, endpoint_id) REFERENCES webhook_endpoints (tenant_id, id)
);

-- Every attempt, for GET /v1/events/{id}/deliveries.
CREATE TABLE webhook_attempts (
    tenant_id   text NOT NULL,
    event_id    text NOT NULL,
    endpoint_id text NOT NULL,
    attempt     integer NOT NULL CHECK (attempt >= 1),
    status      integer,
    error       text CHECK (length(error) <= 500),
    duration_ms integer NOT NULL CHECK (duration_ms >= 0),
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, event_id, endpoint_id, attempt),
    FOREIGN KEY (tenant_id, event_id, endpoint_id) REFERENCES webhook_deliveries (tenant_id, event_id, endpoint_id)
);

-- The operator plane (docs/operations.md, "Operators"): people who resolve
-- what the machine could not prove. Operators are not tenants: their tokens
-- ("cfo_…", only sha256 of the secret kept) serve /ops/ and nothing else,
-- and a tenant's API key never serves /ops/.
CREATE TABLE operators (
    id          text PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 100),
    role        text NOT NULL CHECK (role IN ('admin', 'viewer')),
    secret_hash bytea NOT NULL CHECK (length(secret_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

-- Sessions of the operator's page (docs/architecture.md, "Operators"), here
-- rather than in an API process so that any process serves any operator and
-- signing out or revoking ends a session everywhere at once. Only sha256 of
-- the session id is kept: whoever reads this table cannot act as an
-- operator. The page's CSRF token is an HMAC keyed by the session id, so it
-- needs no column.
CREATE TABLE operator_sessions (
    id_hash     bytea PRIMARY KEY CHECK (length(id_hash) = 32),
    operator_id text NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL CHECK (expires_at > created_at)
);

-- Every sign-in deletes the sessions that expired; a new token for an
-- operator ends the operator's sessions.
CREATE INDEX operator_sessions_expires_at ON operator_sessions (expires_at);
CREATE INDEX operator_sessions_operator ON operator_sessions (operator_id);
