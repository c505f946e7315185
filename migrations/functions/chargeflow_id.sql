-- chargeflow_id makes an id as package ids does: prefix, "_", and 26
-- lowercase Crockford base32 digits of 130 bits: two zero bits and 48 bits
-- of milliseconds (ten digits), then 80 random bits (sixteen digits), here
-- two 40-bit numbers from the random bytes of a version 4 UUID (bytes 0-4
-- and 10-14; its version and variant bits are in bytes 6 and 8). Ids sort
-- by time, so cursors stay on the primary key.
--
-- PL/pgSQL rather than SQL: a SQL function that cannot be inlined is parsed
-- and planned again at every call, and a trigger calls this for every
-- event; a PL/pgSQL function keeps its plans for the connection's life.
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
