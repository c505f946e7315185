-- Events (docs/webhooks.md): what a merchant is told. An event is written by
-- a trigger in the same transaction as the move that causes it, so there is
-- no move to succeeded, failed or needs_review without its event and no
-- event without its move, whichever code path moved the row and whatever
-- crashes. The event keeps the row as the move left it (snapshot); the API
-- renders it as the charge or refund object, so there is one renderer.

-- chargeflow_id makes an id as package ids does: prefix, "_", and 26
-- lowercase Crockford base32 digits of 48 bits of milliseconds and 80
-- random bits, so ids sort by time and cursors stay on the primary key.
CREATE FUNCTION chargeflow_id(prefix text) RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    alphabet constant text := '0123456789abcdefghjkmnpqrstvwxyz';
    ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
    bytes bytea := substring(int8send(ms) FROM 3 FOR 6)
        || substring(uuid_send(gen_random_uuid()) FROM 1 FOR 6)
        || substring(uuid_send(gen_random_uuid()) FROM 11 FOR 4);
    out text := '';
    digit int;
    bit int;
BEGIN
    -- 128 bits read most significant first, after two zero bits: 26
    -- digits of 5 bits. get_bit numbers bits from the right of each byte.
    FOR i IN 0..25 LOOP
        digit := 0;
        FOR j IN 0..4 LOOP
            bit := i * 5 + j - 2;
            digit := digit * 2;
            IF bit >= 0 THEN
                digit := digit + get_bit(bytes, (bit / 8) * 8 + 7 - bit % 8);
            END IF;
        END LOOP;
        out := out || substr(alphabet, digit + 1, 1);
    END LOOP;
    RETURN prefix || '_' || out;
END
$$;

CREATE TABLE events (
    tenant_id  text NOT NULL REFERENCES tenants (id),
    id         text NOT NULL CHECK (id ~ '^evt_[0-9a-hjkmnp-tv-z]{26}$'),
    type       text NOT NULL CHECK (type IN ('charge.succeeded', 'charge.failed', 'charge.needs_review',
                                             'refund.succeeded', 'refund.failed', 'refund.needs_review')),
    object_id  text NOT NULL,
    -- The row of charges as the move left it.
    snapshot   jsonb NOT NULL CHECK (jsonb_typeof(snapshot) = 'object'),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, object_id) REFERENCES charges (tenant_id, id)
);

-- A merchant's listing, newest first, optionally by type.
CREATE INDEX events_tenant_type_id ON events (tenant_id, type, id);

CREATE FUNCTION events_on_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (tenant_id, id, type, object_id, snapshot)
    VALUES (NEW.tenant_id, chargeflow_id('evt'), NEW.kind || '.' || NEW.state, NEW.id, to_jsonb(NEW));
    RETURN NULL;
END
$$;

CREATE TRIGGER events_on_move AFTER UPDATE OF state ON charges
    FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('succeeded', 'failed', 'needs_review'))
    EXECUTE FUNCTION events_on_move();
