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
// A charge accepted with "capture": false is only authorized: the
// provider's answer (or lookup) that it holds the money moves it to
// requires_capture instead of succeeded, and a capture or a cancel — rows
// of their own, kinds capture and cancel, through the same moves above —
// moves it on when it succeeds (operations_account, in the operation's own
// transaction), or the provider's release of an expired hold does
// (docs/capture.md):
//
//	submitting, unknown,   authorized            capture succeeded
//	needs_review ───────► requires_capture ──────────────────► succeeded
//	                           │   ▲ a capture or cancel           (amount_captured)
//	                           │   └── that failed leaves it held
//	                           │ cancel succeeded, or the hold
//	                           ▼ expired at the provider (found)
//	                        canceled  (also from submitting, unknown,
//	                                   needs_review: found released)
//
// The same moves as a table (Transitions is the one copy in Go; the
// charge_transitions table is the one copy in SQL, and a test keeps them
// equal):
//
//	pending          → submitting | failed
//	submitting       → succeeded | failed | unknown | pending | requires_capture | canceled
//	                   (pending only when the call provably never left)
//	unknown          → succeeded | failed | pending | needs_review | requires_capture | canceled
//	                   (pending only on proven not-found)
//	needs_review     → succeeded | failed | pending | requires_capture | canceled (an operator, with evidence)
//	requires_capture → succeeded | canceled (its capture or cancel, or the hold's expiry)
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
