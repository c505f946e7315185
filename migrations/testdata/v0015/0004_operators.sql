-- The operator plane (docs/operations.md, "Operators"): people who resolve
-- what the machine could not prove. Operators are not tenants: their tokens
-- ("cfo_…", only sha256 of the secret kept) serve /ops/ and nothing else,
-- and a tenant's API key never serves /ops/.
CREATE TABLE operators (
    id          text PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 100),
    role        text NOT NULL CHECK (role IN ('admin', 'viewer')),
    secret_hash bytea NOT NULL CHECK (length(secret_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

-- An operator action that moves nothing (a forced reconcile) is still an
-- event of the charge: `action` names it, `to_state` is the state the charge
-- stayed in and `from_state` is NULL (so the foreign key to the transitions,
-- which only moves must satisfy, does not apply).
ALTER TABLE charge_events ADD COLUMN action text CHECK (action IS NULL OR action ~ '^[a-z_]{1,64}$');
ALTER TABLE charge_events DROP CONSTRAINT charge_events_creation_is_pending;
ALTER TABLE charge_events ADD CONSTRAINT charge_events_creation_is_pending
    CHECK (from_state IS NOT NULL OR to_state = 'pending' OR action IS NOT NULL);

-- When an operator last forced a lookup of the charge, and when any lookup
-- last ran: forced lookups are spaced by a floor, so a loop of reconcile
-- requests cannot override the lookup backoff and hammer the provider.
ALTER TABLE charges ADD COLUMN last_lookup_at timestamptz;
ALTER TABLE charges ADD COLUMN forced_check_at timestamptz;

-- Operators find a charge by its id alone (ids are unique across tenants:
-- 80 random bits each); the primary key starts with the tenant.
CREATE INDEX charges_id ON charges (id);
