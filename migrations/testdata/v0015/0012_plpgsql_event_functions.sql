-- The two functions every settling move's event trigger calls, in
-- PL/pgSQL rather than SQL (docs/architecture.md, "Writes per charge").
--
-- A SQL-language function that cannot be inlined is parsed and planned
-- again for every query that calls it; called from a trigger, that is every
-- move, in every transaction. A PL/pgSQL function keeps its plans for the
-- life of the connection. Measured with pgbench, one call per transaction:
-- chargeflow_id cost 168 µs of server time and costs 24 µs;
-- decide_deliveries (no endpoint subscribed) cost 177 µs and costs 38 µs.
-- What they do is unchanged.

-- The id layout of internal/ids: prefix, "_", 26 Crockford base32 digits of
-- 130 bits: two zero bits and 48 bits of milliseconds (ten digits), then 80
-- random bits (sixteen digits), here two 40-bit numbers from the random
-- bytes of a version 4 UUID (bytes 0-4 and 10-14; its version and variant
-- bits are in bytes 6 and 8).
CREATE OR REPLACE FUNCTION chargeflow_id(prefix text) RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    alphabet constant text := '0123456789abcdefghjkmnpqrstvwxyz';
    ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
    u bytea := uuid_send(gen_random_uuid());
    r1 bigint := ('x' || encode(substring(u FROM 1 FOR 5), 'hex'))::bit(40)::bigint;
    r2 bigint := ('x' || encode(substring(u FROM 11 FOR 5), 'hex'))::bit(40)::bigint;
    out text := prefix || '_';
BEGIN
    FOR i IN REVERSE 9..0 LOOP
        out := out || substr(alphabet, ((ms >> (5 * i)) & 31)::int + 1, 1);
    END LOOP;
    FOR i IN REVERSE 7..0 LOOP
        out := out || substr(alphabet, ((r1 >> (5 * i)) & 31)::int + 1, 1);
    END LOOP;
    FOR i IN REVERSE 7..0 LOOP
        out := out || substr(alphabet, ((r2 >> (5 * i)) & 31)::int + 1, 1);
    END LOOP;
    RETURN out;
END
$$;

-- One delivery row and one River job per endpoint of the tenant that is
-- neither disabled nor deleted and subscribes to the event's type (or '*').
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
