-- Support for the reconciler's sweep of stranded pending charges: a pending
-- charge whose charge.submit job River no longer intends to run (discarded
-- after a crash loop, cancelled by hand) would otherwise wait forever.
CREATE INDEX charges_pending_since ON charges (updated_at) WHERE state = 'pending';
CREATE INDEX river_job_charge_submit_charge ON river_job ((args->>'charge_id')) WHERE kind = 'charge.submit';
