-- A tenant is never deleted and its id never changes, so checking that it
-- exists once, when a charge is born (charges_guard), holds for the life of
-- every row keyed by it: the idempotency record and the events name the
-- charge, which names the tenant. No foreign key to tenants has to lock
-- its row on every write (docs/architecture.md, "Writes per charge").
CREATE OR REPLACE FUNCTION tenants_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'tenant % cannot be deleted or renumbered: its charges name it', OLD.id USING ERRCODE = 'CF011';
END
$$;

CREATE OR REPLACE TRIGGER tenants_kept BEFORE DELETE OR UPDATE OF id ON tenants
    FOR EACH ROW EXECUTE FUNCTION tenants_kept();
