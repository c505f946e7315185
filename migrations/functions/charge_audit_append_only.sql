-- The audit trail is append-only: no row of it is ever changed or removed.
CREATE OR REPLACE FUNCTION charge_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'charge_audit is append-only' USING ERRCODE = 'CF003';
END
$$;

CREATE OR REPLACE TRIGGER charge_audit_append_only BEFORE UPDATE OR DELETE ON charge_audit
    FOR EACH ROW EXECUTE FUNCTION charge_audit_append_only();
