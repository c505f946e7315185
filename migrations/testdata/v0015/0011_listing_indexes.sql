-- Operators list the charges of every tenant in one state, newest first
-- (the operator page opens on the needs_review queue). The in-flight states
-- already have partial indexes (the reconciler's and the stranded-pending
-- sweep's), small by nature; these two give the remaining non-majority
-- states theirs, so such a page reads its rows and no others. Each costs
-- one index entry when a charge moves into its state, nothing on accept and
-- nothing on the move to succeeded (docs/architecture.md, "Schema").
CREATE INDEX charges_needs_review_id ON charges (id) WHERE state = 'needs_review';
CREATE INDEX charges_failed_id ON charges (id) WHERE state = 'failed';
