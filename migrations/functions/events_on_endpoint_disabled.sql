-- An event when an endpoint is disabled (docs/webhooks.md): a delivery that
-- failed every attempt disables its endpoint, and the merchant is told, on
-- its other endpoints, as of a charge's move: in the transaction that
-- disables the endpoint, so there is no disabled endpoint without its event
-- and no event without the disabling. The snapshot is the endpoint without
-- its secret, which is shown once, at creation. The disabled endpoint
-- itself is decided nothing: it is disabled by now.
CREATE OR REPLACE FUNCTION events_on_endpoint_disabled() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_id text := chargeflow_id('evt');
BEGIN
    INSERT INTO events (tenant_id, id, type, object_id, snapshot)
    VALUES (NEW.tenant_id, event_id, 'webhook_endpoint.disabled', NEW.id, to_jsonb(NEW) - 'secret');
    PERFORM decide_deliveries(NEW.tenant_id, event_id, 'webhook_endpoint.disabled');
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER events_on_endpoint_disabled AFTER UPDATE OF disabled_at ON webhook_endpoints
    FOR EACH ROW WHEN (OLD.disabled_at IS NULL AND NEW.disabled_at IS NOT NULL)
    EXECUTE FUNCTION events_on_endpoint_disabled();
