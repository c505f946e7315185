-- An event is written by its move (docs/webhooks.md): for every row a
-- statement moved to succeeded, failed or needs_review (and a charge
-- captured later: authorized, captured, canceled), one event with the
-- row as the move left it, and one delivery and one webhook.deliver job per
-- subscribed endpoint (as decide_deliveries writes them), in the
-- transaction of the move, whichever code path moved the row and whatever
-- crashes.
--
-- Once per statement, over its transition tables, not once per row: the
-- worker settles many charges in one statement. A trigger with transition
-- tables cannot name columns (UPDATE OF state), so it fires for every
-- UPDATE of charges and finds the moved rows itself, joining the old and
-- new rows on the primary key (which charges_guard keeps from changing).
CREATE OR REPLACE FUNCTION events_on_moves() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH moved AS (
        SELECT n.tenant_id, chargeflow_id('evt') AS event_id, t.event_type, n.id, to_jsonb(n) AS snapshot
        FROM new_rows n JOIN old_rows o ON o.tenant_id = n.tenant_id AND o.id = n.id
        CROSS JOIN LATERAL (SELECT CASE
            WHEN n.kind = 'charge' AND n.state = 'requires_capture' THEN 'charge.authorized'
            WHEN n.kind = 'charge' AND n.state = 'succeeded' AND o.state = 'requires_capture' THEN 'charge.captured'
            WHEN n.kind = 'charge' AND n.state = 'canceled' THEN 'charge.canceled'
            WHEN n.kind IN ('charge', 'refund') AND n.state IN ('succeeded', 'failed', 'needs_review')
                THEN n.kind || '.' || n.state
            -- A capture's or cancel's success is its charge's move above.
            WHEN n.kind IN ('capture', 'cancel') AND n.state IN ('failed', 'needs_review')
                THEN n.kind || '.' || n.state
        END AS event_type) t
        WHERE n.state IS DISTINCT FROM o.state AND t.event_type IS NOT NULL
    ), written AS (
        INSERT INTO events (tenant_id, id, type, object_id, snapshot)
        SELECT tenant_id, event_id, event_type, id, snapshot FROM moved
        RETURNING tenant_id, id, type
    ), subscribed AS (
        INSERT INTO webhook_deliveries (tenant_id, event_id, endpoint_id)
        SELECT w.tenant_id, w.id, e.id FROM written w JOIN webhook_endpoints e ON e.tenant_id = w.tenant_id
        WHERE e.disabled_at IS NULL AND e.deleted_at IS NULL AND (w.type = ANY (e.events) OR '*' = ANY (e.events))
        RETURNING tenant_id, event_id, endpoint_id
    )
    INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags)
    SELECT jsonb_build_object('tenant_id', tenant_id, 'event_id', event_id, 'endpoint_id', endpoint_id),
        'webhook.deliver', 40, '{}', 1, 'webhooks', now(), 'available', '{}'
    FROM subscribed;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER events_on_moves AFTER UPDATE ON charges
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION events_on_moves();
