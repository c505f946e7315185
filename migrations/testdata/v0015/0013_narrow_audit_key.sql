-- The audit trail's primary key without the tenant (docs/architecture.md,
-- "Bytes per charge"). A row is found by its charge, whose id is unique
-- on its own (48 bits of milliseconds and 80 random ones), and the
-- tenant's foreign key to the charge stays; the key carried a 30-byte
-- tenant id in every entry, three entries a charge, and was larger than
-- the rows it indexed.
ALTER TABLE charge_events DROP CONSTRAINT charge_events_pkey;
ALTER TABLE charge_events ADD PRIMARY KEY (charge_id, id);
