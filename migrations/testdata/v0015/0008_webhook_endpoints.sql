-- Webhook endpoints and their deliveries (docs/webhooks.md). A delivery is
-- decided with its event: the events trigger, in the transaction of the
-- move, writes one delivery row and one River job (kind webhook.deliver,
-- queue webhooks) per endpoint of the tenant that subscribes to the
-- event's type. The job carries it; the row is its log.

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

-- The events trigger of 0007, now also deciding the deliveries.
CREATE OR REPLACE FUNCTION events_on_move() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_id text := chargeflow_id('evt');
    event_type text := NEW.kind || '.' || NEW.state;
BEGIN
    INSERT INTO events (tenant_id, id, type, object_id, snapshot)
    VALUES (NEW.tenant_id, event_id, event_type, NEW.id, to_jsonb(NEW));

    WITH subscribed AS (
        INSERT INTO webhook_deliveries (tenant_id, event_id, endpoint_id)
        SELECT NEW.tenant_id, event_id, e.id FROM webhook_endpoints e
        WHERE e.tenant_id = NEW.tenant_id AND e.disabled_at IS NULL AND e.deleted_at IS NULL
          AND (event_type = ANY (e.events) OR '*' = ANY (e.events))
        RETURNING endpoint_id
    )
    INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags)
    SELECT jsonb_build_object('tenant_id', NEW.tenant_id, 'event_id', event_id, 'endpoint_id', endpoint_id),
        'webhook.deliver', 40, '{}', 1, 'webhooks', now(), 'available', '{}'
    FROM subscribed;
    RETURN NULL;
END
$$;
