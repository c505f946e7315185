-- decide_deliveries writes one delivery row and one River job (kind
-- webhook.deliver, queue webhooks; webhook.DeliverArgs) per endpoint of the
-- tenant that is neither disabled nor deleted and subscribes to the event's
-- type (or to '*'). events_on_moves writes the same rows for a statement's
-- events at once. The job row is what River's own insert writes for the
-- same job (webhook's TestDeliverJobsMatchRiverInsert holds it to that).
CREATE OR REPLACE FUNCTION decide_deliveries(tenant text, event text, event_type text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
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
END
$$;
