-- operations_account keeps a held charge's captures and cancels
-- (docs/capture.md). A new operation claims its charge: the charge must be
-- authorized and held (requires_capture), of the operation's currency and
-- provider, with no other operation in flight, and a capture may take at
-- most what was authorized. The UPDATE takes the charge's row lock, so two
-- operations accepted at once queue on it and the second finds the first
-- in flight. The refusals: CF011, another operation is in flight; CF013, a
-- capture beyond the authorization; CF012, the charge is not held.
--
-- When the operation succeeds, its charge moves in the same transaction,
-- with an audit entry naming it: captured (succeeded, with what was
-- captured) or released (canceled). When it fails, the charge stays held
-- and may be captured or canceled again. An operation in needs_review
-- keeps its charge's claim until an operator settles it: whether it
-- happened at the provider is not known.
CREATE OR REPLACE FUNCTION operations_account() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    held charges%ROWTYPE;
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE charges SET op_in_flight = NEW.id
            WHERE tenant_id = NEW.tenant_id AND id = NEW.parent_id AND kind = 'charge'
              AND state = 'requires_capture' AND op_in_flight IS NULL
              AND currency = NEW.currency AND provider = NEW.provider AND NEW.amount <= amount;
        IF FOUND THEN
            RETURN NULL;
        END IF;
        SELECT * INTO held FROM charges WHERE tenant_id = NEW.tenant_id AND id = NEW.parent_id;
        IF held.state = 'requires_capture' AND held.op_in_flight IS NOT NULL THEN
            RAISE EXCEPTION 'charge % has operation % in flight', NEW.parent_id, held.op_in_flight USING ERRCODE = 'CF011';
        ELSIF held.state = 'requires_capture' AND held.currency = NEW.currency AND NEW.amount > held.amount THEN
            RAISE EXCEPTION 'capture of % beyond the % authorized on charge %', NEW.amount, held.amount, NEW.parent_id
                USING ERRCODE = 'CF013';
        END IF;
        RAISE EXCEPTION 'charge % is not held for capture', NEW.parent_id USING ERRCODE = 'CF012';
    ELSIF NEW.state = 'succeeded' THEN
        WITH moved AS (
            UPDATE charges SET
                state = CASE WHEN NEW.kind = 'capture' THEN 'succeeded' ELSE 'canceled' END,
                amount_captured = CASE WHEN NEW.kind = 'capture' THEN NEW.amount END,
                op_in_flight = NULL, updated_at = now()
            WHERE tenant_id = NEW.tenant_id AND id = NEW.parent_id AND state = 'requires_capture'
              AND op_in_flight = NEW.id
            RETURNING tenant_id, id, state, attempts
        )
        INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt, evidence)
        SELECT tenant_id, id, 'requires_capture', state, NEW.kind || ':' || NEW.id,
            CASE WHEN NEW.kind = 'capture' THEN 'captured' ELSE 'released' END, attempts,
            NEW.kind || ' ' || NEW.id || ': ' || NEW.amount || ' in minor units of ' || NEW.currency
        FROM moved;
        IF NOT FOUND THEN
            -- Only the operation that holds the claim moves its charge, and
            -- nothing else moves a charge with an operation in flight.
            RAISE EXCEPTION '% % succeeded but charge % is not held by it', NEW.kind, NEW.id, NEW.parent_id
                USING ERRCODE = 'CF014';
        END IF;
    ELSIF NEW.state = 'failed' THEN
        UPDATE charges SET op_in_flight = NULL
            WHERE tenant_id = NEW.tenant_id AND id = NEW.parent_id AND op_in_flight = NEW.id;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER operations_account AFTER INSERT ON charges
    FOR EACH ROW WHEN (NEW.kind IN ('capture', 'cancel')) EXECUTE FUNCTION operations_account();
CREATE OR REPLACE TRIGGER operations_settle AFTER UPDATE OF state ON charges
    FOR EACH ROW WHEN (NEW.kind IN ('capture', 'cancel') AND NEW.state IS DISTINCT FROM OLD.state
                       AND NEW.state IN ('failed', 'succeeded'))
    EXECUTE FUNCTION operations_account();
