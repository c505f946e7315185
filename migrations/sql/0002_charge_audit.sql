-- The audit trail is charge_audit, its rows audit entries: "event" names
-- only what merchants are told (the events table; docs/architecture.md,
-- "Glossary"). Every name the table gave its constraints, key, sequence and
-- trigger follows it. The trigger and its function are remade under the
-- new name by functions/charge_audit_append_only.sql, applied after every
-- migration; a database migrated afresh never had the old ones.
ALTER TABLE charge_events RENAME TO charge_audit;
ALTER INDEX charge_events_pkey RENAME TO charge_audit_pkey;
ALTER SEQUENCE charge_events_id_seq RENAME TO charge_audit_id_seq;
ALTER TABLE charge_audit RENAME CONSTRAINT charge_events_action_check TO charge_audit_action_check;
ALTER TABLE charge_audit RENAME CONSTRAINT charge_events_actor_check TO charge_audit_actor_check;
ALTER TABLE charge_audit RENAME CONSTRAINT charge_events_attempt_check TO charge_audit_attempt_check;
ALTER TABLE charge_audit RENAME CONSTRAINT charge_events_creation_is_pending TO charge_audit_creation_is_pending;
ALTER TABLE charge_audit RENAME CONSTRAINT charge_events_legal_move TO charge_audit_legal_move;
ALTER TABLE charge_audit RENAME CONSTRAINT charge_events_reason_check TO charge_audit_reason_check;
ALTER TABLE charge_audit RENAME CONSTRAINT charge_events_tenant_id_charge_id_fkey TO charge_audit_tenant_id_charge_id_fkey;
DROP TRIGGER IF EXISTS charge_events_append_only ON charge_audit;
DROP FUNCTION IF EXISTS charge_events_append_only();
DELETE FROM chargeflow_functions WHERE name = 'charge_events_append_only';
