-- The admin audit: what was done to tenants, their API keys and operators,
-- and by whom (docs/operations.md, "Administration"). One row per action,
-- written in the action's transaction; append-only
-- (functions/admin_audit_append_only.sql). It never holds a key, a token or
-- its hash: subjects are ids and names.
CREATE TABLE admin_audit (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    actor   text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    action  text NOT NULL CHECK (action ~ '^[a-z_]+\.[a-z_]+$'),
    subject text NOT NULL CHECK (length(subject) BETWEEN 1 AND 200),
    detail  text NOT NULL DEFAULT '' CHECK (length(detail) <= 1000)
);
