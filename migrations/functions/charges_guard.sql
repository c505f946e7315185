-- charges_guard enforces what a CHECK constraint cannot: a charge or refund
-- is born pending, of a tenant that exists; its identity, money, kind,
-- parent, reason and whether it is captured later never change; its provider and provider key change only
-- when a pending charge moves to the next account of its route (route_seq
-- one more, the key following it by charges_provider_key_of_id); and its
-- state only moves along charge_transitions. Nullable columns compare with
-- IS DISTINCT FROM.
--
-- The tenant is read without a lock rather than checked by a foreign key,
-- which would take FOR KEY SHARE on the tenant's one row for every charge
-- (tenants_kept keeps it from going; docs/architecture.md, "Writes per
-- charge").
CREATE OR REPLACE FUNCTION charges_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'pending' THEN
            RAISE EXCEPTION 'a charge is created pending, not %', NEW.state USING ERRCODE = 'CF001';
        END IF;
        -- The tenant's existence, read without a lock (tenants_kept).
        IF NOT EXISTS (SELECT 1 FROM tenants WHERE id = NEW.tenant_id) THEN
            RAISE EXCEPTION 'charge % names no tenant (%)', NEW.id, NEW.tenant_id USING ERRCODE = '23503';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.tenant_id <> OLD.tenant_id OR NEW.id <> OLD.id OR NEW.amount <> OLD.amount
        OR NEW.currency <> OLD.currency OR NEW.payment_method IS DISTINCT FROM OLD.payment_method
        OR NEW.created_at <> OLD.created_at OR NEW.kind <> OLD.kind
        OR NEW.parent_id IS DISTINCT FROM OLD.parent_id OR NEW.reason IS DISTINCT FROM OLD.reason
        OR NEW.capture_later <> OLD.capture_later THEN
        RAISE EXCEPTION 'the identity and money of charge % cannot change', OLD.id USING ERRCODE = 'CF002';
    END IF;
    IF (NEW.provider <> OLD.provider OR NEW.provider_key <> OLD.provider_key OR NEW.route_seq <> OLD.route_seq)
        AND NOT (OLD.kind = 'charge' AND OLD.state = 'pending' AND NEW.state = 'pending'
                 AND NEW.route_seq = OLD.route_seq + 1 AND NEW.provider <> OLD.provider) THEN
        RAISE EXCEPTION 'the provider and provider key of charge % change only by a reroute of a pending charge', OLD.id
            USING ERRCODE = 'CF002';
    END IF;
    IF NEW.state <> OLD.state AND NOT EXISTS (
        SELECT 1 FROM charge_transitions WHERE from_state = OLD.state AND to_state = NEW.state
    ) THEN
        RAISE EXCEPTION 'illegal charge move % -> %', OLD.state, NEW.state USING ERRCODE = 'CF001';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER charges_guard BEFORE INSERT OR UPDATE ON charges
    FOR EACH ROW EXECUTE FUNCTION charges_guard();
