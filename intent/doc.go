// Package intent is the charge intent: the durable record that a merchant
// asked for a charge, the state machine it moves through, its idempotency
// record and its append-only audit trail, stored in Postgres with pgx.
//
// A charge is accepted pending and ends in a state that is proven, never
// guessed:
//
//	accept ──► pending ◄───────────────────────────────┐
//	(API)       │    │                                 │ the call provably
//	            │    └──► failed (River gave up;       │ never left (refused
//	    worker, │         nothing was ever applied)    │ connection, 429)
//	    before  ▼                                      │
//	    the   submitting ──────────────────────────────┘
//	    call    │   │   │
//	            │   │   └── declined ─────────────────────► failed
//	  confirmed │   │
//	            ▼   │ timeout, reset after send, 5xx,
//	     succeeded  │ garbage, a crash mid-call
//	            ▲   ▼
//	   found ───┴─ unknown ── found, declined ────────────► failed
//	 (reconciler)   │   │
//	                │   └── outside policy ──► needs_review ──► succeeded
//	 proven         │       (lookup down too     (an operator,   failed
//	 not-found ─────┘        long, too many      with written    pending
//	 → pending, new job,     attempts, key       evidence)
//	 same provider key       window ending,
//	                         amount mismatch)
//
// The same moves as a table (Transitions is the one copy in Go; the
// charge_transitions table is the one copy in SQL, and a test keeps them
// equal):
//
//	pending      → submitting | failed
//	submitting   → succeeded | failed | unknown | pending   (pending only when the call provably never left)
//	unknown      → succeeded | failed | pending | needs_review (pending only on proven not-found)
//	needs_review → succeeded | failed | pending             (an operator, with evidence)
//
// Every move is a compare-and-set on the current state (and, for the
// reconciler, on its lease token) that appends a row to charge_audit in the
// same statement. Zero rows updated is ErrConflict or ErrFenced, never an
// overwrite. The database refuses an illegal move on its own, through the
// charges_guard trigger, so a bug in Go cannot write one.
//
// Functions that touch the database take the handle right after ctx, so the
// caller owns the transaction: the API writes the charge, its idempotency
// record and the River job in one; the worker writes the provider's answer
// and completes its job in one.
package intent
