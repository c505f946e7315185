-- An event when an endpoint is disabled (docs/webhooks.md): a delivery that
-- failed every attempt disables its endpoint, and the merchant is told, on
-- its other endpoints, as it is told of a charge's move — by a trigger, in
-- the transaction that disables the endpoint, so there is no disabled
-- endpoint without its event and no event without the disabling.

-- An event is now about a charge or refund, or about an endpoint: its type
-- says which. object_id stays the one reference; the two generated columns
-- split it so that each kind keeps its foreign key.
ALTER TABLE events DROP CONSTRAINT events_tenant_id_object_id_fkey;
ALTER TABLE events DROP CONSTRAINT events_type_check;
ALTER TABLE events ADD CONSTRAINT events_type_check CHECK (type IN (
    'charge.succeeded', 'charge.failed', 'charge.needs_review',
    'refund.succeeded', 'refund.failed', 'refund.needs_review',
    'webhook_endpoint.disabled'));
ALTER TABLE events
    ADD COLUMN charge_id text GENERATED ALWAYS AS
        (CASE WHEN type NOT LIKE 'webhook\_endpoint.%' THEN object_id END) STORED,
    ADD COLUMN endpoint_id text GENERATED ALWAYS AS
        (CASE WHEN type LIKE 'webhook\_endpoint.%' THEN object_id END) STORED;
ALTER TABLE events
    ADD CONSTRAINT events_charge_fkey FOREIGN KEY (tenant_id, charge_id) REFERENCES charges (tenant_id, id),
    ADD CONSTRAINT events_endpoint_fkey FOREIGN KEY (tenant_id, endpoint_id) REFERENCES webhook_endpoints (tenant_id, id);

-- decide_deliveries writes one delivery row and one River job per endpoint
-- of the tenant that is neither disabled nor deleted and subscribes to the
-- event's type (or to '*'): what the events trigger of 0008 did inline.
CREATE FUNCTION decide_deliveries(tenant text, event text, event_type text) RETURNS void LANGUAGE sql AS $$
    WITH subscribed AS (
        INSERT INTO webhook_deliveries (tenant_id, event_id, endpoint_id)
        SELECT tenant, event, e.id FROM webhook_endpoints e
        WHERE e.tenant_id = tenant AND e.disabled_at IS NULL AND e.deleted_at IS NULL
          AND (event_type = ANY (e.events) OR '*' = ANY (e.events))
        RETURNING endpoint_id
    )
    INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags)
    SELECT jsonb_build_object('tenant_id', tenant, 'event_id', event, 'endpoint_id', endpoint_id),
        'webhook.deliver', 40, '{}', 1, 'webhooks', now(), 'available', '{}'
    FROM subscribed;
$$;

CREATE OR REPLACE FUNCTION events_on_move() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_id text := chargeflow_id('evt');
    event_type text := NEW.kind || '.' || NEW.state;
BEGIN
    INSERT INTO events (tenant_id, id, type, object_id, snapshot)
    VALUES (NEW.tenant_id, event_id, event_type, NEW.id, to_jsonb(NEW));
    PERFORM decide_deliveries(NEW.tenant_id, event_id, event_type);
    RETURN NULL;
END
$$;

-- The endpoint as the disabling left it, without its secret: the secret is
-- shown once, at creation, and an event is shown to anyone who reads the
-- tenant's events. The disabled endpoint itself is decided nothing (it is
-- disabled by now), so the event goes to the tenant's other endpoints.
CREATE FUNCTION events_on_endpoint_disabled() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_id text := chargeflow_id('evt');
BEGIN
    INSERT INTO events (tenant_id, id, type, object_id, snapshot)
    VALUES (NEW.tenant_id, event_id, 'webhook_endpoint.disabled', NEW.id, to_jsonb(NEW) - 'secret');
    PERFORM decide_deliveries(NEW.tenant_id, event_id, 'webhook_endpoint.disabled');
    RETURN NULL;
END
$$;

CREATE TRIGGER events_on_endpoint_disabled AFTER UPDATE OF disabled_at ON webhook_endpoints
    FOR EACH ROW WHEN (OLD.disabled_at IS NULL AND NEW.disabled_at IS NOT NULL)
    EXECUTE FUNCTION events_on_endpoint_disabled();
