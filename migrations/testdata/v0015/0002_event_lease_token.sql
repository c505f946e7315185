-- The lease token a reconciler held when it wrote an event. Accepted writes
-- are fenced on the token and every lease increments it, so a charge's
-- reconciler events carry strictly increasing tokens; the scenario runner
-- checks that, which would expose a stale write that slipped past the fence.
ALTER TABLE charge_events ADD COLUMN lease_token bigint;
