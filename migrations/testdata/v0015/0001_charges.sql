-- The charge intent, its idempotency records and its audit trail.
--
-- Every primary key starts with tenant_id so that tenants can later be spread
-- across databases without rewriting keys. Invariants live in the schema as
-- well as in Go: the state machine is a table and a trigger refuses any move
-- that is not in it, even if the Go code were wrong.

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

-- The legal moves of the charge state machine (intent/doc.go draws it). The
-- trigger below and the foreign key on charge_events both consult it.
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

CREATE TABLE charges (
    tenant_id          text NOT NULL REFERENCES tenants (id),
    id                 text NOT NULL CHECK (id ~ '^ch_[0-9a-z]{26}$'),
    state              text NOT NULL CHECK (state IN ('pending', 'submitting', 'unknown', 'succeeded', 'failed', 'needs_review')),
    amount             bigint NOT NULL CHECK (amount > 0),
    currency           text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    payment_method     text NOT NULL CHECK (length(payment_method) BETWEEN 1 AND 255),
    description        text,
    metadata           jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    -- Which provider the charge goes to, and the idempotency key it is sent
    -- with. The key is derived from the charge id when the charge is created
    -- and never changes, whatever the number of attempts.
    provider           text NOT NULL CHECK (length(provider) BETWEEN 1 AND 64),
    provider_key       text NOT NULL CHECK (length(provider_key) BETWEEN 1 AND 255),
    provider_charge_id text,
    failure_code       text,
    review_reason      text,
    -- How many times the provider has been called for this charge.
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
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, provider, provider_key),
    CONSTRAINT charges_succeeded_has_provider_charge CHECK (state <> 'succeeded' OR provider_charge_id IS NOT NULL),
    CONSTRAINT charges_failed_has_code CHECK (state <> 'failed' OR failure_code IS NOT NULL),
    CONSTRAINT charges_review_has_reason CHECK (state <> 'needs_review' OR review_reason IS NOT NULL),
    CONSTRAINT charges_unknown_has_check CHECK (state <> 'unknown' OR (next_check_at IS NOT NULL AND unknown_since IS NOT NULL))
);

-- Listing by status, newest first, cursor on id.
CREATE INDEX charges_tenant_state_id ON charges (tenant_id, state, id);
-- The reconciler's two work queues.
CREATE INDEX charges_unknown_next_check ON charges (next_check_at) WHERE state = 'unknown';
CREATE INDEX charges_submitting_since ON charges (last_attempt_at) WHERE state = 'submitting';

-- charges_guard enforces what a CHECK constraint cannot: a charge is born
-- pending, its identity and money never change, and its state only moves
-- along charge_transitions.
CREATE FUNCTION charges_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'pending' THEN
            RAISE EXCEPTION 'a charge is created pending, not %', NEW.state USING ERRCODE = 'CF001';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.tenant_id <> OLD.tenant_id OR NEW.id <> OLD.id OR NEW.amount <> OLD.amount
        OR NEW.currency <> OLD.currency OR NEW.payment_method <> OLD.payment_method
        OR NEW.provider <> OLD.provider OR NEW.provider_key <> OLD.provider_key
        OR NEW.created_at <> OLD.created_at THEN
        RAISE EXCEPTION 'the identity, money and provider key of charge % cannot change', OLD.id USING ERRCODE = 'CF002';
    END IF;
    IF NEW.state <> OLD.state AND NOT EXISTS (
        SELECT 1 FROM charge_transitions WHERE from_state = OLD.state AND to_state = NEW.state
    ) THEN
        RAISE EXCEPTION 'illegal charge move % -> %', OLD.state, NEW.state USING ERRCODE = 'CF001';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER charges_guard BEFORE INSERT OR UPDATE ON charges
    FOR EACH ROW EXECUTE FUNCTION charges_guard();

-- The append-only audit trail: one row per move, written in the same
-- transaction as the move. The creation event has no from_state.
CREATE TABLE charge_events (
    tenant_id  text NOT NULL,
    charge_id  text NOT NULL,
    id         bigint GENERATED ALWAYS AS IDENTITY,
    from_state text,
    to_state   text NOT NULL,
    actor      text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    reason     text NOT NULL CHECK (length(reason) BETWEEN 1 AND 200),
    attempt    integer NOT NULL CHECK (attempt >= 0),
    evidence   text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, charge_id, id),
    FOREIGN KEY (tenant_id, charge_id) REFERENCES charges (tenant_id, id),
    FOREIGN KEY (from_state, to_state) REFERENCES charge_transitions (from_state, to_state),
    CONSTRAINT charge_events_creation_is_pending CHECK (from_state IS NOT NULL OR to_state = 'pending')
);

CREATE FUNCTION charge_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'charge_events is append-only' USING ERRCODE = 'CF003';
END
$$;

CREATE TRIGGER charge_events_append_only BEFORE UPDATE OR DELETE ON charge_events
    FOR EACH ROW EXECUTE FUNCTION charge_events_append_only();

-- One row per (tenant, idempotency key): the fingerprint of the request that
-- first used the key and the response it got, written in the same
-- transaction as the charge. Only a hash of the key is kept.
CREATE TABLE idempotency_keys (
    tenant_id     text NOT NULL REFERENCES tenants (id),
    key_hash      bytea NOT NULL CHECK (length(key_hash) = 32),
    fingerprint   bytea NOT NULL CHECK (length(fingerprint) = 32),
    charge_id     text NOT NULL,
    status_code   smallint NOT NULL CHECK (status_code BETWEEN 200 AND 599),
    response_body bytea NOT NULL,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL CHECK (expires_at > created_at),
    PRIMARY KEY (tenant_id, key_hash),
    FOREIGN KEY (tenant_id, charge_id) REFERENCES charges (tenant_id, id)
);

CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);
