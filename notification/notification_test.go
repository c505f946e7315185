package notification_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/notification"
	"github.com/chargeflow/chargeflow/psp"
)

// secret signs the fake provider's notifications.
const secret = "whsec_test_notification_package_01"

// provider is what dbtest names the provider of its rows.
const provider = "fakepsp"

// env is a fresh database with a tenant, a real fake provider on loopback
// that notifies a receiver of everything it applies, the provider's client,
// and an Applier of the provider's notifications. The subtests of a test
// share one env and take its notifications off the one receiver in the
// order they make them, so they run one after another, never in parallel.
type env struct {
	pool     *pgxpool.Pool
	receiver *fakepsptest.Receiver
	client   *psp.Client
	applier  *notification.Applier
	tenant   string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := dbtest.Pool(t)
	receiver := fakepsptest.StartReceiver(t, nil)
	p := fakepsptest.Start(t, fakepsp.Config{Notifications: fakepsp.Notifications{URL: receiver.URL, Secret: secret}})
	applier, err := notification.New(notification.Config{DB: pool, Provider: provider})
	require.NoError(t, err)
	return &env{
		pool:     pool,
		receiver: receiver,
		client:   psp.NewClient(psp.Config{BaseURL: p.URL, Timeout: 2 * time.Second}),
		applier:  applier,
		tenant:   dbtest.Tenant(t, pool, "tenant-a"),
	}
}

// walk moves c through states as the worker and the reconciler would, and
// returns it as stored; a success is the provider's providerID.
func (e *env) walk(t *testing.T, c intent.Charge, providerID string, states ...intent.State) intent.Charge {
	t.Helper()
	return dbtest.Walk(t, e.pool, c, providerID, states...)
}

func (e *env) find(t *testing.T, c intent.Charge) intent.Charge {
	t.Helper()
	found, err := intent.Find(context.Background(), e.pool, c.ID)
	require.NoError(t, err)
	return found
}

// charge is a pending charge of 1,000 USD walked through states.
func (e *env) charge(t *testing.T, states ...intent.State) intent.Charge {
	t.Helper()
	return e.walk(t, dbtest.PendingCharge(t, e.pool, dbtest.Charge{TenantID: e.tenant}), "py_walked", states...)
}

// next is the provider's next notification, verified as the API verifies
// it.
func (e *env) next(t *testing.T) psp.Notification {
	t.Helper()
	d := e.receiver.Next(t, 30*time.Second)
	n, err := psp.ParseNotification(secret, d.Header, d.Body, time.Time{}, 0)
	require.NoError(t, err)
	require.True(t, n.Actionable(), "%s", d.Body)
	return n
}

// charged applies a charge at the provider under c's provider key, as a
// call whose answer was lost would have, and returns the provider's
// notification of it.
func (e *env) charged(t *testing.T, c intent.Charge, amount int64, currency, paymentMethod, reference string) psp.Notification {
	t.Helper()
	_, err := e.client.Charge(context.Background(), psp.ChargeRequest{Key: c.ProviderKey, Amount: amount,
		Currency: currency, PaymentMethod: paymentMethod, Reference: reference})
	require.NoError(t, err)
	n := e.next(t)
	require.Equal(t, psp.NotificationCharge, n.Kind)
	require.Equal(t, c.ProviderKey, n.ProviderKey)
	return n
}

// refund is a refund of amount of a 1,000 USD charge that succeeded at the
// provider, walked through states, and the provider's id of that charge.
func (e *env) refund(t *testing.T, amount int64, states ...intent.State) (intent.Charge, string) {
	t.Helper()
	parent := dbtest.PendingCharge(t, e.pool, dbtest.Charge{TenantID: e.tenant})
	paid := e.charged(t, parent, parent.Amount, parent.Currency, fakepsp.PaymentMethodVisa, parent.ID)
	parent = e.walk(t, parent, paid.ProviderID, intent.StateSubmitting, intent.StateSucceeded)
	r := dbtest.PendingRefund(t, e.pool, parent, amount)
	return e.walk(t, r, "", states...), paid.ProviderID
}

// refunded applies a refund of amount at the provider under r's provider
// key and returns the provider's notification of it.
func (e *env) refunded(t *testing.T, r intent.Charge, parentProviderID string, amount int64) psp.Notification {
	t.Helper()
	_, err := e.client.Refund(context.Background(), psp.RefundRequest{Key: r.ProviderKey, Charge: parentProviderID,
		Amount: amount, Currency: r.Currency, Reference: r.ID})
	require.NoError(t, err)
	n := e.next(t)
	require.Equal(t, psp.NotificationRefund, n.Kind)
	require.Equal(t, r.ProviderKey, n.ProviderKey)
	return n
}

// stored is a row and its audit trail.
type stored struct {
	charge intent.Charge
	audit  []intent.AuditEntry
}

func (e *env) stored(t *testing.T, c intent.Charge) stored {
	t.Helper()
	audit, err := intent.AuditTrail(context.Background(), e.pool, c.TenantID, c.ID)
	require.NoError(t, err)
	return stored{charge: e.find(t, c), audit: audit}
}

// apply applies n and checks what Apply says it did.
func (e *env) apply(t *testing.T, a *notification.Applier, n psp.Notification, want string) {
	t.Helper()
	got, err := a.Apply(context.Background(), n)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// newMoves are the audit entries of c written since before.
func (e *env) newMoves(t *testing.T, c intent.Charge, before stored) (intent.Charge, []intent.AuditEntry) {
	t.Helper()
	after := e.stored(t, c)
	require.GreaterOrEqual(t, len(after.audit), len(before.audit))
	require.Equal(t, before.audit, after.audit[:len(before.audit)], "the trail only grows")
	return after.charge, after.audit[len(before.audit):]
}

// requireMove checks one audit entry of a notification's move.
func requireMove(t *testing.T, m intent.AuditEntry, from, to intent.State, reason string) {
	t.Helper()
	require.Equal(t, from, m.From)
	require.Equal(t, to, m.To)
	require.Equal(t, notification.Actor, m.Actor)
	require.Equal(t, reason, m.Reason)
}

// A verified notification settles a submitting or unknown charge or refund
// by settle.Moves: a success with the provider's id, a decline with its
// code; a second delivery of it, and one arriving after the row settled
// some other way, move nothing.
func TestNotificationSettles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	t.Run("SubmittingChargeSucceeds", func(t *testing.T) {
		c := e.charge(t, intent.StateSubmitting)
		n := e.charged(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodVisa, c.ID)
		before := e.stored(t, c)
		e.apply(t, e.applier, n, "settled")
		row, moves := e.newMoves(t, c, before)
		require.Equal(t, intent.StateSucceeded, row.State)
		require.Equal(t, n.ProviderID, row.ProviderChargeID)
		require.Len(t, moves, 1)
		requireMove(t, moves[0], intent.StateSubmitting, intent.StateSucceeded, "notification_succeeded")

		settled := e.stored(t, c)
		e.apply(t, e.applier, n, "no_op")
		require.Equal(t, settled, e.stored(t, c), "a duplicate moves nothing")
	})

	t.Run("UnknownChargeIsDeclined", func(t *testing.T) {
		c := e.charge(t, intent.StateSubmitting, intent.StateUnknown)
		n := e.charged(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodInsufficientFunds, c.ID)
		require.Equal(t, psp.StatusFailed, n.Charge.Status)
		before := e.stored(t, c)
		e.apply(t, e.applier, n, "settled")
		row, moves := e.newMoves(t, c, before)
		require.Equal(t, intent.StateFailed, row.State)
		require.Equal(t, "insufficient_funds", row.FailureCode)
		require.Len(t, moves, 1)
		requireMove(t, moves[0], intent.StateUnknown, intent.StateFailed, "notification_declined")
		require.Equal(t, "provider charge "+n.ProviderID, moves[0].Evidence)

		settled := e.stored(t, c)
		e.apply(t, e.applier, n, "no_op")
		require.Equal(t, settled, e.stored(t, c), "a duplicate moves nothing")
	})

	for _, from := range []intent.State{intent.StateSubmitting, intent.StateUnknown} {
		t.Run("RefundFrom_"+string(from), func(t *testing.T) {
			states := []intent.State{intent.StateSubmitting}
			if from == intent.StateUnknown {
				states = append(states, intent.StateUnknown)
			}
			r, parentID := e.refund(t, 400, states...)
			n := e.refunded(t, r, parentID, 400)
			before := e.stored(t, r)
			e.apply(t, e.applier, n, "settled")
			row, moves := e.newMoves(t, r, before)
			require.Equal(t, intent.StateSucceeded, row.State)
			require.Equal(t, n.ProviderID, row.ProviderChargeID)
			require.Len(t, moves, 1)
			requireMove(t, moves[0], from, intent.StateSucceeded, "notification_succeeded")
			parent, err := intent.Get(context.Background(), e.pool, r.TenantID, r.ParentID)
			require.NoError(t, err)
			require.EqualValues(t, 400, parent.AmountRefunded, "the refund's money is counted on its charge")

			settled := e.stored(t, r)
			e.apply(t, e.applier, n, "no_op")
			require.Equal(t, settled, e.stored(t, r), "a duplicate moves nothing")
		})
	}

	// The worker or the reconciler settled the row first, on the same
	// answer: the notification is a no-op.
	t.Run("AfterTheRowSettled", func(t *testing.T) {
		paid := e.charge(t, intent.StateSubmitting)
		n := e.charged(t, paid, paid.Amount, paid.Currency, fakepsp.PaymentMethodVisa, paid.ID)
		paid = e.walk(t, paid, n.ProviderID, intent.StateSucceeded)
		before := e.stored(t, paid)
		e.apply(t, e.applier, n, "no_op")
		require.Equal(t, before, e.stored(t, paid))

		declined := e.charge(t, intent.StateSubmitting)
		n = e.charged(t, declined, declined.Amount, declined.Currency, fakepsp.PaymentMethodDeclined, declined.ID)
		declined = e.walk(t, declined, "", intent.StateFailed)
		before = e.stored(t, declined)
		e.apply(t, e.applier, n, "no_op")
		require.Equal(t, before, e.stored(t, declined))
	})
}

// A notification moves only a submitting or unknown row of its provider
// and its key: another provider's row, a pending one, a terminal one, one
// in review, one of another key, and a success of a row that settled
// failed are left as they are.
func TestNotificationMovesNothingElse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	// Each case makes a row and the provider's notification about it, and
	// says what Apply answers.
	for _, tc := range []struct {
		name    string
		row     func(t *testing.T) (intent.Charge, psp.Notification)
		applier func(t *testing.T) *notification.Applier
		want    string
	}{
		{"AnotherProvidersRow", func(t *testing.T) (intent.Charge, psp.Notification) {
			c := e.charge(t, intent.StateSubmitting)
			return c, e.charged(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodVisa, c.ID)
		}, func(t *testing.T) *notification.Applier {
			// This row went to fakepsp; these notifications are Stripe's.
			a, err := notification.New(notification.Config{DB: e.pool, Provider: "stripe"})
			require.NoError(t, err)
			return a
		}, "ignored:other_provider"},
		{"PendingRow", func(t *testing.T) (intent.Charge, psp.Notification) {
			c := e.charge(t)
			return c, e.charged(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodVisa, c.ID)
		}, nil, "no_op"},
		{"InReview", func(t *testing.T) (intent.Charge, psp.Notification) {
			c := e.charge(t, intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)
			return c, e.charged(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodVisa, c.ID)
		}, nil, "no_op"},
		{"InReviewDeclined", func(t *testing.T) (intent.Charge, psp.Notification) {
			c := e.charge(t, intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)
			return c, e.charged(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodDeclined, c.ID)
		}, nil, "no_op"},
		{"FailedRowTheProviderSaysSucceeded", func(t *testing.T) (intent.Charge, psp.Notification) {
			c := e.charge(t, intent.StateSubmitting, intent.StateFailed)
			return c, e.charged(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodVisa, c.ID)
		}, nil, "no_op:contradicts_settled_state"},
		{"SucceededRowOfAnotherProviderID", func(t *testing.T) (intent.Charge, psp.Notification) {
			c := e.charge(t, intent.StateSubmitting, intent.StateSucceeded) // as py_walked
			return c, e.charged(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodVisa, c.ID)
		}, nil, "ignored:provider_id_mismatch"},
		{"AnotherKeysCharge", func(t *testing.T) (intent.Charge, psp.Notification) {
			// The provider holds, under another row's key, a charge naming
			// this row: not this row's request.
			c := e.charge(t, intent.StateSubmitting)
			other := e.charge(t, intent.StateSubmitting)
			return c, e.charged(t, other, c.Amount, c.Currency, fakepsp.PaymentMethodVisa, c.ID)
		}, nil, "ignored:key_mismatch"},
		{"ARefundOfACharge", func(t *testing.T) (intent.Charge, psp.Notification) {
			// A refund notification naming a charge row.
			r, parentID := e.refund(t, 400, intent.StateSubmitting)
			n := e.refunded(t, r, parentID, 400)
			c := e.charge(t, intent.StateSubmitting)
			n.Reference, n.Refund.Reference, n.ProviderKey = c.ID, c.ID, c.ProviderKey
			return c, n
		}, nil, "ignored:kind_mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, n := tc.row(t)
			a := e.applier
			if tc.applier != nil {
				a = tc.applier(t)
			}
			before := e.stored(t, c)
			e.apply(t, a, n, tc.want)
			require.Equal(t, before, e.stored(t, c), "nothing moved")
		})
	}

	// A notification of no row of ours.
	stranger := intent.Charge{ProviderKey: "cf_not_ours"}
	e.apply(t, e.applier, e.charged(t, stranger, 1000, "USD", fakepsp.PaymentMethodVisa, "ch_not_ours"), "ignored:unknown_reference")
}

// A notification whose money or reference is not the row's is never a
// settlement of it: settle.Moves sends a submitting row through unknown to
// needs_review (two moves in one transaction), an unknown one straight to
// needs_review, whatever the notification's status, and Apply reports
// "needs_review:amount_mismatch" (docs/notifications.md). A second
// delivery then finds the row in review and moves nothing.
func TestNotificationContradictingTheRowGoesToReview(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	for _, tc := range []struct {
		name string
		from []intent.State
		// notify makes the provider's notification about c.
		notify func(t *testing.T, c intent.Charge) psp.Notification
		// amount, currency and reference are what the notification says.
		amount    int64
		currency  string
		reference func(c intent.Charge) string
	}{
		{"OtherAmountFromSubmitting", []intent.State{intent.StateSubmitting}, func(t *testing.T, c intent.Charge) psp.Notification {
			return e.charged(t, c, 999, c.Currency, fakepsp.PaymentMethodVisa, c.ID)
		}, 999, "USD", nil},
		{"OtherCurrencyFromUnknown", []intent.State{intent.StateSubmitting, intent.StateUnknown}, func(t *testing.T, c intent.Charge) psp.Notification {
			return e.charged(t, c, c.Amount, "EUR", fakepsp.PaymentMethodVisa, c.ID)
		}, 1000, "EUR", nil},
		{"DeclineOfOtherMoney", []intent.State{intent.StateSubmitting}, func(t *testing.T, c intent.Charge) psp.Notification {
			return e.charged(t, c, 1, c.Currency, fakepsp.PaymentMethodDeclined, c.ID)
		}, 1, "USD", nil},
		{"OtherReference", []intent.State{intent.StateSubmitting, intent.StateUnknown}, func(t *testing.T, c intent.Charge) psp.Notification {
			// The fake protocol's notification names its row by the
			// charge's reference, so no genuine one names one row and
			// carries another's reference; Apply's input can, and Moves
			// must catch it.
			n := e.charged(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodVisa, c.ID)
			n.Charge.Reference = "ch_someone_else"
			return n
		}, 1000, "USD", func(intent.Charge) string { return "ch_someone_else" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.charge(t, tc.from...)
			n := tc.notify(t, c)
			before := e.stored(t, c)
			e.apply(t, e.applier, n, "needs_review:amount_mismatch")
			row, moves := e.newMoves(t, c, before)
			require.Equal(t, intent.StateNeedsReview, row.State)
			require.Empty(t, row.ProviderChargeID, "a contradicting answer names no provider charge of ours")
			reference := c.ID
			if tc.reference != nil {
				reference = tc.reference(c)
			}
			require.Equal(t, fmt.Sprintf("provider holds %d %s for reference %q under this key; the charge is 1000 USD",
				tc.amount, tc.currency, reference), row.ReviewReason)

			from := tc.from[len(tc.from)-1]
			if from == intent.StateSubmitting {
				require.Len(t, moves, 2, "every doubt goes through unknown")
				requireMove(t, moves[0], intent.StateSubmitting, intent.StateUnknown, "provider_answer_mismatch")
				require.Empty(t, moves[0].Evidence)
				moves = moves[1:]
			}
			require.Len(t, moves, 1)
			requireMove(t, moves[0], intent.StateUnknown, intent.StateNeedsReview, "amount_mismatch")
			require.Equal(t, "provider charge "+n.ProviderID, moves[0].Evidence)

			inReview := e.stored(t, c)
			e.apply(t, e.applier, n, "no_op")
			require.Equal(t, inReview, e.stored(t, c), "a duplicate finds it in review and moves nothing")
		})
	}

	// A refund of other money: the same rule.
	t.Run("RefundOfOtherMoney", func(t *testing.T) {
		r, parentID := e.refund(t, 500, intent.StateSubmitting)
		n := e.refunded(t, r, parentID, 400)
		before := e.stored(t, r)
		e.apply(t, e.applier, n, "needs_review:amount_mismatch")
		row, moves := e.newMoves(t, r, before)
		require.Equal(t, intent.StateNeedsReview, row.State)
		require.Len(t, moves, 2)
		requireMove(t, moves[0], intent.StateSubmitting, intent.StateUnknown, "provider_answer_mismatch")
		requireMove(t, moves[1], intent.StateUnknown, intent.StateNeedsReview, "amount_mismatch")
		require.Equal(t, "provider refund "+n.ProviderID, moves[1].Evidence)
		parent, err := intent.Get(context.Background(), e.pool, r.TenantID, r.ParentID)
		require.NoError(t, err)
		require.Zero(t, parent.AmountRefunded, "nothing refunded on our books")
	})
}

// New needs a database and the provider's name.
func TestNewRefuses(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	_, err := notification.New(notification.Config{Provider: provider})
	require.Error(t, err)
	_, err = notification.New(notification.Config{DB: pool})
	require.Error(t, err)
}

// A notification that is not a final answer is ignored before anything is
// read.
func TestNotificationNotActionable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.charge(t, intent.StateSubmitting)
	before := e.stored(t, c)
	e.apply(t, e.applier, psp.Notification{Kind: psp.NotificationIgnored, Reason: "unhandled_type", Reference: c.ID}, "ignored:unhandled_type")
	require.Equal(t, before, e.stored(t, c))
}

// A provider a charge was rerouted away from says it charged it after all:
// the proof the move rested on was broken. Nothing moves, but the charge's
// audit trail says so for a person; a decline from it, or any word from a
// provider the charge never was at, is ignored.
func TestLateChargeAtAPreviousProvider(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()

	c := e.charge(t)
	n := e.charged(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodVisa, c.ID)
	_, err := intent.RerouteCharge(ctx, e.pool, intent.Reroute{TenantID: c.TenantID, ChargeID: c.ID, From: provider, To: "backup",
		Actor: "test", Evidence: "not_applied:connection_refused"})
	require.NoError(t, err)
	before := e.stored(t, c)
	e.apply(t, e.applier, n, "alert:"+intent.ActionLateCharge)
	row, entries := e.newMoves(t, c, before)
	require.Equal(t, intent.StatePending, row.State, "nothing moved")
	require.Equal(t, "backup", row.Provider)
	require.Len(t, entries, 1)
	require.Equal(t, intent.ActionLateCharge, entries[0].Action)
	require.Contains(t, entries[0].Evidence, n.ProviderID)

	declined := e.charge(t)
	d := e.charged(t, declined, declined.Amount, declined.Currency, fakepsp.PaymentMethodDeclined, declined.ID)
	_, err = intent.RerouteCharge(ctx, e.pool, intent.Reroute{TenantID: declined.TenantID, ChargeID: declined.ID, From: provider,
		To: "backup", Actor: "test", Evidence: "not_applied:connection_refused"})
	require.NoError(t, err)
	e.apply(t, e.applier, d, "ignored:other_provider")

	elsewhere, err := notification.New(notification.Config{DB: e.pool, Provider: "never-there"})
	require.NoError(t, err)
	other := e.charge(t)
	o := e.charged(t, other, other.Amount, other.Currency, fakepsp.PaymentMethodVisa, other.ID)
	before = e.stored(t, other)
	e.apply(t, elsewhere, o, "ignored:other_provider")
	require.Equal(t, before, e.stored(t, other))
}

// A notification that arrives while the worker moves the row to unknown
// (an Adyen refund is acknowledged, then notified at once) settles it
// still: read against the row again, not dropped as a lost race.
func TestNotificationRacingTheWorkersMoveToUnknown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	c := e.charge(t, intent.StateSubmitting)
	n := e.charged(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodVisa, c.ID)

	// The worker's move, not yet committed, holds the row.
	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = intent.MoveCharge(ctx, tx, intent.Move{TenantID: c.TenantID, ChargeID: c.ID, From: intent.StateSubmitting,
		To: intent.StateUnknown, Actor: "worker", Reason: "unknown:refund_received"})
	require.NoError(t, err)

	type result struct {
		action string
		err    error
	}
	applied := make(chan result, 1)
	go func() {
		action, err := e.applier.Apply(ctx, n)
		applied <- result{action, err}
	}()
	// The notification read the row as submitting and now waits on its lock.
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		return waiting > 0
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, tx.Commit(ctx))

	got := <-applied
	require.NoError(t, got.err)
	require.Equal(t, "settled", got.action)
	row := e.find(t, c)
	require.Equal(t, intent.StateSucceeded, row.State)
	require.Equal(t, n.ProviderID, row.ProviderChargeID)
}

// A capture's or cancel's notification (Adyen's CAPTURE, CAPTURE_FAILED,
// CANCELLATION: about the operation, by its reference) settles the
// operation by settle.OperationMoves, and its success moves the held charge
// in the same transaction; an authorization's notification of a charge
// captured later (Adyen's AUTHORISATION, which does not say whether it was
// captured) is a hold, not a success.
func TestNotificationSettlesOperations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	held := func(t *testing.T) intent.Charge {
		c := dbtest.PendingCharge(t, e.pool, dbtest.Charge{TenantID: e.tenant, CaptureLater: true})
		return e.walk(t, c, "psp_held", intent.StateSubmitting, intent.StateRequiresCapture)
	}
	operation := func(t *testing.T, parent intent.Charge, kind intent.Kind) intent.Charge {
		op, err := dbtest.PendingOperation(e.pool, parent, kind, parent.Amount)
		require.NoError(t, err)
		return e.walk(t, op, "", intent.StateSubmitting, intent.StateUnknown)
	}
	notified := func(kind psp.NotificationKind, op intent.Charge, status psp.Status, captured int64, code string) psp.Notification {
		return psp.Notification{Kind: kind, Reference: op.ID, ProviderID: "psp_modification",
			Charge: psp.Charge{ID: "psp_held", Status: status, AmountCaptured: captured, Currency: op.Currency, DeclineCode: code}}
	}

	t.Run("CaptureSucceeds", func(t *testing.T) {
		parent := held(t)
		op := operation(t, parent, intent.KindCapture)
		e.apply(t, e.applier, notified(psp.NotificationCapture, op, psp.StatusSucceeded, op.Amount, ""), "settled")
		require.Equal(t, intent.StateSucceeded, e.find(t, op).State)
		got := e.find(t, parent)
		require.Equal(t, intent.StateSucceeded, got.State)
		require.Equal(t, op.Amount, got.AmountCaptured)
	})

	t.Run("CaptureFailedLeavesTheChargeHeld", func(t *testing.T) {
		parent := held(t)
		op := operation(t, parent, intent.KindCapture)
		e.apply(t, e.applier, notified(psp.NotificationCapture, op, psp.StatusFailed, 0, "capture_failed"), "settled")
		row := e.find(t, op)
		require.Equal(t, intent.StateFailed, row.State)
		require.Equal(t, "capture_failed", row.FailureCode)
		got := e.find(t, parent)
		require.Equal(t, intent.StateRequiresCapture, got.State)
		require.Empty(t, got.OpInFlight, "another capture or a cancel may follow")
	})

	t.Run("CancelReleases", func(t *testing.T) {
		parent := held(t)
		op := operation(t, parent, intent.KindCancel)
		n := notified(psp.NotificationCancel, op, psp.StatusCanceled, 0, "")
		e.apply(t, e.applier, n, "settled")
		require.Equal(t, intent.StateCanceled, e.find(t, parent).State)
		e.apply(t, e.applier, n, "no_op")
	})

	t.Run("ACaptureNotificationIsNotACancels", func(t *testing.T) {
		op := operation(t, held(t), intent.KindCancel)
		e.apply(t, e.applier, notified(psp.NotificationCapture, op, psp.StatusSucceeded, op.Amount, ""), "ignored:kind_mismatch")
		require.Equal(t, intent.StateUnknown, e.find(t, op).State)
	})

	t.Run("AuthorizationOfAChargeCapturedLaterIsAHold", func(t *testing.T) {
		c := dbtest.PendingCharge(t, e.pool, dbtest.Charge{TenantID: e.tenant, CaptureLater: true})
		c = e.walk(t, c, "", intent.StateSubmitting, intent.StateUnknown)
		n := psp.Notification{Kind: psp.NotificationCharge, Reference: c.ID, ProviderID: "psp_auth", Authorization: true,
			Charge: psp.Charge{ID: "psp_auth", Status: psp.StatusSucceeded, Amount: c.Amount, Currency: c.Currency, Reference: c.ID}}
		e.apply(t, e.applier, n, "settled")
		got := e.find(t, c)
		require.Equal(t, intent.StateRequiresCapture, got.State)
		require.Equal(t, "psp_auth", got.ProviderChargeID)
	})
}
