-- refunds_account keeps a charge's refund sums. A new refund reserves its
-- amount on a succeeded charge of its currency, or is refused (CF010: not
-- refundable); the UPDATE takes the charge's row lock, so concurrent
-- refunds from any number of API processes queue on it and the constraint
-- charges_refunds_within_amount sees every committed reservation (23514:
-- beyond the charge). A refund that fails releases its reservation; one
-- that succeeds is added to amount_refunded.
CREATE OR REPLACE FUNCTION refunds_account() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE charges SET amount_reserved = amount_reserved + NEW.amount
            WHERE tenant_id = NEW.tenant_id AND id = NEW.parent_id AND kind = 'charge'
              AND state = 'succeeded' AND currency = NEW.currency;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'charge % is not refundable', NEW.parent_id USING ERRCODE = 'CF010';
        END IF;
    ELSIF NEW.state = 'failed' THEN
        UPDATE charges SET amount_reserved = amount_reserved - NEW.amount
            WHERE tenant_id = NEW.tenant_id AND id = NEW.parent_id;
    ELSIF NEW.state = 'succeeded' THEN
        UPDATE charges SET amount_refunded = amount_refunded + NEW.amount
            WHERE tenant_id = NEW.tenant_id AND id = NEW.parent_id;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER refunds_account AFTER INSERT ON charges
    FOR EACH ROW WHEN (NEW.kind = 'refund') EXECUTE FUNCTION refunds_account();
CREATE OR REPLACE TRIGGER refunds_settle AFTER UPDATE OF state ON charges
    FOR EACH ROW WHEN (NEW.kind = 'refund' AND NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('failed', 'succeeded'))
    EXECUTE FUNCTION refunds_account();
