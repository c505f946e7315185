-- Authorize now, capture later (docs/capture.md). A charge accepted with
-- "capture": false is only authorized at its provider and waits, held, in
-- requires_capture; a capture (kind 'capture', "cp_…") or a cancel (kind
-- 'cancel', "cx_…") is a row of its own, a child of the charge like a
-- refund, with its own provider key, job and moves. operations_account
-- keeps one operation in flight per charge and moves the charge when its
-- operation succeeds, in the operation's own transaction. A hold the
-- provider released (a cancel, or its expiry) leaves the charge canceled.

ALTER TABLE charges ADD COLUMN capture_later boolean NOT NULL DEFAULT false;
-- What the capture took, on a captured charge; NULL on any other row.
ALTER TABLE charges ADD COLUMN amount_captured bigint;
-- The capture or cancel of this charge that is on its way, if any.
ALTER TABLE charges ADD COLUMN op_in_flight text;

ALTER TABLE charges DROP CONSTRAINT charges_id_check;
ALTER TABLE charges ADD CONSTRAINT charges_id_check CHECK (id ~ '^(ch|re|cp|cx)_[0-9a-z]{26}$');
ALTER TABLE charges DROP CONSTRAINT charges_state_check;
ALTER TABLE charges ADD CONSTRAINT charges_state_check CHECK (state IN (
    'pending', 'submitting', 'unknown', 'requires_capture', 'succeeded', 'canceled', 'failed', 'needs_review'));
ALTER TABLE charges DROP CONSTRAINT charges_kind_check;
ALTER TABLE charges ADD CONSTRAINT charges_kind_check CHECK (kind IN ('charge', 'refund', 'capture', 'cancel'));

ALTER TABLE charges DROP CONSTRAINT charges_kind_shape;
ALTER TABLE charges ADD CONSTRAINT charges_kind_shape CHECK (
    (kind = 'charge' AND id LIKE 'ch\_%' AND parent_id IS NULL AND reason IS NULL AND payment_method IS NOT NULL)
    OR (kind <> 'charge' AND parent_id IS NOT NULL AND payment_method IS NULL
        AND amount_reserved = 0 AND amount_refunded = 0 AND NOT capture_later
        AND amount_captured IS NULL AND op_in_flight IS NULL
        AND ((kind = 'refund' AND id LIKE 're\_%')
             OR (kind = 'capture' AND id LIKE 'cp\_%' AND reason IS NULL)
             OR (kind = 'cancel' AND id LIKE 'cx\_%' AND reason IS NULL))));

-- Held and released charges are authorized ones, named by the provider.
ALTER TABLE charges ADD CONSTRAINT charges_authorized_has_provider_charge CHECK (
    state NOT IN ('requires_capture', 'canceled') OR (capture_later AND provider_charge_id IS NOT NULL));
-- A charge captured later is succeeded with what its capture took, never
-- more than was authorized; an operation is in flight only on a held one.
ALTER TABLE charges ADD CONSTRAINT charges_captured_amount CHECK (
    (amount_captured IS NULL OR (amount_captured > 0 AND amount_captured <= amount))
    AND (NOT capture_later OR state <> 'succeeded' OR amount_captured IS NOT NULL));
ALTER TABLE charges ADD CONSTRAINT charges_op_in_flight_held CHECK (op_in_flight IS NULL OR state = 'requires_capture');
-- Refunds apply to what was captured.
ALTER TABLE charges DROP CONSTRAINT charges_refunds_within_amount;
ALTER TABLE charges ADD CONSTRAINT charges_refunds_within_amount CHECK (
    amount_refunded >= 0 AND amount_refunded <= amount_reserved AND amount_reserved <= coalesce(amount_captured, amount));

INSERT INTO charge_transitions (from_state, to_state) VALUES
    ('submitting', 'requires_capture'),
    ('submitting', 'canceled'),
    ('unknown', 'requires_capture'),
    ('unknown', 'canceled'),
    ('needs_review', 'requires_capture'),
    ('needs_review', 'canceled'),
    ('requires_capture', 'succeeded'),
    ('requires_capture', 'canceled');

-- The audit trail's legal moves are remade from the table (0001_baseline).
ALTER TABLE charge_audit DROP CONSTRAINT charge_audit_legal_move;
DO $$
DECLARE
    moves text;
BEGIN
    SELECT string_agg(quote_literal(from_state || '>' || to_state), ', ' ORDER BY from_state, to_state)
        INTO moves FROM charge_transitions;
    EXECUTE format('ALTER TABLE charge_audit ADD CONSTRAINT charge_audit_legal_move
        CHECK (from_state IS NULL OR from_state || ''>'' || to_state IN (%s))', moves);
END
$$;

ALTER TABLE events DROP CONSTRAINT events_type_check;
ALTER TABLE events ADD CONSTRAINT events_type_check CHECK (type IN (
    'charge.succeeded', 'charge.failed', 'charge.needs_review',
    'charge.authorized', 'charge.captured', 'charge.canceled',
    'refund.succeeded', 'refund.failed', 'refund.needs_review',
    'capture.failed', 'capture.needs_review', 'cancel.failed', 'cancel.needs_review',
    'webhook_endpoint.disabled'));

-- The hold sweep (reconciler): held charges, oldest authorization first;
-- and the census's estimate of the released ones (intent.TakeCensus), as
-- of the failed ones.
CREATE INDEX charges_requires_capture_since ON charges (first_attempt_at) WHERE state = 'requires_capture';
CREATE INDEX charges_canceled_id ON charges (id) WHERE state = 'canceled';
