-- Refunds (docs/refunds.md, "Where refunds live"). A refund is a row of
-- charges with kind 'refund' and parent_id naming the charge it refunds, so
-- that the state machine and its trigger, the audit trail, the reconciler's
-- lease and fencing and every sweep apply to refunds by construction, not
-- by a copy. Only the provider call, the reading of its answer and the HTTP
-- objects tell the two kinds apart.
ALTER TABLE charges ADD COLUMN kind text NOT NULL DEFAULT 'charge' CHECK (kind IN ('charge', 'refund'));
ALTER TABLE charges ADD COLUMN parent_id text;
ALTER TABLE charges ADD COLUMN reason text CHECK (reason IN ('requested_by_customer', 'duplicate', 'fraudulent'));
-- On a charge: the sum of its refunds that are not failed (reserved the
-- moment a refund is accepted) and of those that succeeded.
ALTER TABLE charges ADD COLUMN amount_reserved bigint NOT NULL DEFAULT 0;
ALTER TABLE charges ADD COLUMN amount_refunded bigint NOT NULL DEFAULT 0;
ALTER TABLE charges ALTER COLUMN payment_method DROP NOT NULL;

ALTER TABLE charges DROP CONSTRAINT charges_id_check;
ALTER TABLE charges ADD CONSTRAINT charges_id_check CHECK (id ~ '^(ch|re)_[0-9a-z]{26}$');
ALTER TABLE charges ADD CONSTRAINT charges_kind_shape CHECK (
    (kind = 'charge' AND id LIKE 'ch\_%' AND parent_id IS NULL AND reason IS NULL AND payment_method IS NOT NULL)
    OR (kind = 'refund' AND id LIKE 're\_%' AND parent_id IS NOT NULL AND payment_method IS NULL
        AND amount_reserved = 0 AND amount_refunded = 0));
-- The refunds of a charge that are not failed never add up to more than
-- it: the refund trigger below adds to amount_reserved under the charge's
-- row lock, and this constraint refuses the sum that would pass it.
ALTER TABLE charges ADD CONSTRAINT charges_refunds_within_amount
    CHECK (amount_refunded >= 0 AND amount_refunded <= amount_reserved AND amount_reserved <= amount);
ALTER TABLE charges ADD CONSTRAINT charges_parent FOREIGN KEY (tenant_id, parent_id) REFERENCES charges (tenant_id, id);
CREATE INDEX charges_refunds_of ON charges (tenant_id, parent_id, id) WHERE parent_id IS NOT NULL;

-- The guard of 0001, now also freezing a row's kind, parent and reason.
-- Nullable columns compare with IS DISTINCT FROM.
CREATE OR REPLACE FUNCTION charges_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'pending' THEN
            RAISE EXCEPTION 'a charge is created pending, not %', NEW.state USING ERRCODE = 'CF001';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.tenant_id <> OLD.tenant_id OR NEW.id <> OLD.id OR NEW.amount <> OLD.amount
        OR NEW.currency <> OLD.currency OR NEW.payment_method IS DISTINCT FROM OLD.payment_method
        OR NEW.provider <> OLD.provider OR NEW.provider_key <> OLD.provider_key
        OR NEW.created_at <> OLD.created_at OR NEW.kind <> OLD.kind
        OR NEW.parent_id IS DISTINCT FROM OLD.parent_id OR NEW.reason IS DISTINCT FROM OLD.reason THEN
        RAISE EXCEPTION 'the identity, money and provider key of charge % cannot change', OLD.id USING ERRCODE = 'CF002';
    END IF;
    IF NEW.state <> OLD.state AND NOT EXISTS (
        SELECT 1 FROM charge_transitions WHERE from_state = OLD.state AND to_state = NEW.state
    ) THEN
        RAISE EXCEPTION 'illegal charge move % -> %', OLD.state, NEW.state USING ERRCODE = 'CF001';
    END IF;
    RETURN NEW;
END
$$;

-- refunds_account keeps a charge's refund sums. A new refund reserves its
-- amount on a succeeded charge of its currency, or is refused (CF010: not
-- refundable); the UPDATE takes the charge's row lock, so concurrent
-- refunds from any number of API processes queue on it and the constraint
-- charges_refunds_within_amount sees every committed reservation (23514:
-- beyond the charge). A refund that fails releases its reservation; one
-- that succeeds is added to amount_refunded.
CREATE FUNCTION refunds_account() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER refunds_account AFTER INSERT ON charges
    FOR EACH ROW WHEN (NEW.kind = 'refund') EXECUTE FUNCTION refunds_account();
CREATE TRIGGER refunds_settle AFTER UPDATE OF state ON charges
    FOR EACH ROW WHEN (NEW.kind = 'refund' AND NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('failed', 'succeeded'))
    EXECUTE FUNCTION refunds_account();
