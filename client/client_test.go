package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/client"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/tenant"
)

func visa(key string) client.ChargeParams {
	return client.ChargeParams{
		Amount: 1000, Currency: "USD", PaymentMethod: "pm_card_visa",
		Description: "Order A-1", Metadata: map[string]string{"order": "A-1"},
		IdempotencyKey: key,
	}
}

// A charge is created once per key: the second call with the key is the
// replay of the first, and the database holds one charge. Two calls without
// a key are two keys, and so two charges — why a merchant keeps its key.
func TestCreateChargeOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t)
	c, _ := s.newClient(t, s.url)

	key := client.NewIdempotencyKey()
	first, err := c.CreateCharge(ctx, visa(key))
	require.NoError(t, err)
	require.False(t, first.Replayed)
	require.True(t, strings.HasPrefix(first.ID, "ch_"), first.ID)
	require.Equal(t, client.StatusPending, first.Status)
	require.Equal(t, int64(1000), first.Amount)
	require.Equal(t, "USD", first.Currency)
	require.Equal(t, "pm_card_visa", first.PaymentMethod)
	require.Equal(t, "Order A-1", first.Description)
	require.Equal(t, map[string]string{"order": "A-1"}, first.Metadata)
	require.False(t, first.CreatedAt.IsZero())

	again, err := c.CreateCharge(ctx, visa(key))
	require.NoError(t, err)
	require.True(t, again.Replayed, "the second call with the key is the replay")
	again.Replayed = false
	require.Equal(t, first, again)
	require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Jobs: 1}, s.stored(t))

	got, err := c.GetCharge(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, first, got)

	// No key given: each call makes its own, so each is a charge.
	one, err := c.CreateCharge(ctx, visa(""))
	require.NoError(t, err)
	two, err := c.CreateCharge(ctx, visa(""))
	require.NoError(t, err)
	require.NotEqual(t, one.ID, two.ID)
	require.False(t, one.Replayed || two.Replayed)
	require.Equal(t, stored{Charges: 3, IdempotencyKeys: 3, Jobs: 3}, s.stored(t))
}

// Pages of charges, newest first, walked by cursor.
func TestListCharges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t)
	c, _ := s.newClient(t, s.url)

	var created []string
	for range 5 {
		charge, err := c.CreateCharge(ctx, visa(""))
		require.NoError(t, err)
		created = append([]string{charge.ID}, created...) // newest first
	}

	page, err := c.ListCharges(ctx, client.ListChargesParams{Limit: 2})
	require.NoError(t, err)
	require.True(t, page.HasMore)
	require.Equal(t, created[:2], ids(page.Data))
	page, err = c.ListCharges(ctx, client.ListChargesParams{Limit: 2, StartingAfter: page.Data[1].ID})
	require.NoError(t, err)
	require.Equal(t, created[2:4], ids(page.Data))

	var all []*client.Charge
	for charge, err := range c.AllCharges(ctx, client.ListChargesParams{Limit: 2}) {
		require.NoError(t, err)
		all = append(all, charge)
	}
	require.Equal(t, created, ids(all))

	page, err = c.ListCharges(ctx, client.ListChargesParams{Status: client.StatusSucceeded})
	require.NoError(t, err)
	require.Empty(t, page.Data)
	require.False(t, page.HasMore)

	_, err = c.ListCharges(ctx, client.ListChargesParams{Limit: 101})
	apiErr := requireRefused(t, err, http.StatusBadRequest, client.CodeInvalidParameter)
	require.Equal(t, "limit", apiErr.Field)
	for _, err := range c.AllCharges(ctx, client.ListChargesParams{Status: "paid"}) {
		requireRefused(t, err, http.StatusBadRequest, client.CodeInvalidParameter)
	}
}

func ids(charges []*client.Charge) []string {
	var out []string
	for _, c := range charges {
		out = append(out, c.ID)
	}
	return out
}

// The API dies under the client: first its address refuses connections,
// then a connection is reset before the request reaches it, then one is
// reset after the API committed the charge and began its answer, so the
// answer is lost. The client keeps the key through all of it and ends with
// the replay of the one charge the database holds.
func TestRetriesThroughAKilledAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t)
	p := newProxy(t, s.url)
	clock := &testClock{}
	c, seen := s.newClient(t, p.url(), client.WithClock(clock))

	p.down()
	clock.onSleep = func(n int) {
		if n == 2 { // after two refused attempts, the API is back, badly
			p.up(func(conn int) fate {
				switch conn {
				case 1:
					return resetAtOnce
				case 2:
					return resetAfterAnswer
				}
				return pass
			})
		}
	}

	charge, err := c.CreateCharge(ctx, visa(""))
	require.NoError(t, err)
	require.True(t, charge.Replayed, "the answer that counted was lost; the one received is its replay")
	require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Jobs: 1}, s.stored(t))
	var inDB string
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT id FROM charges`).Scan(&inDB))
	require.Equal(t, inDB, charge.ID)

	exchanges := seen.exchanges()
	require.Equal(t, []int{0, 0, 0, 0, http.StatusCreated}, seen.statuses(), "refused, refused, reset, answer lost, replay")
	for _, e := range exchanges {
		require.Equal(t, exchanges[0].key, e.key, "one key on every attempt")
	}
	require.Len(t, exchanges[0].key, 26, "a key the client made: 130 random bits")
	require.Len(t, clock.waits(), 4)
}

// A 401 is definitive only when nothing came before it: here the first
// attempt's answer is lost after the API committed the charge, and the API
// key is revoked before the retry. The 401 comes before the API looks the
// idempotency key up, so it says nothing of the charge: the create ends in
// ErrOutcomeUnknown, and the merchant's call with a new API key and the
// same idempotency key gets the charge.
func TestLostAnswerThenRevokedKeyIsUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, func(o *app.Options) { o.API.AuthCacheTTL = time.Nanosecond })
	p := newProxy(t, s.url)
	p.down()
	p.up(func(conn int) fate {
		if conn == 1 {
			return resetAfterAnswer
		}
		return pass
	})
	clock := &testClock{onSleep: func(int) {
		_, err := s.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = now()`)
		require.NoError(t, err)
	}}
	c, seen := s.newClient(t, p.url(), client.WithClock(clock))
	key := client.NewIdempotencyKey()

	_, err := c.CreateCharge(ctx, visa(key))
	require.ErrorIs(t, err, client.ErrOutcomeUnknown)
	require.ErrorIs(t, err, client.CodeUnauthorized)
	require.Equal(t, []int{0, http.StatusUnauthorized}, seen.statuses())
	require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Jobs: 1}, s.stored(t), "the lost attempt made the charge")

	newAPIKey, err := tenant.NewKey(ctx, s.pool, s.tenantID)
	require.NoError(t, err)
	again, err := client.New(s.url, newAPIKey)
	require.NoError(t, err)
	charge, err := again.CreateCharge(ctx, visa(key))
	require.NoError(t, err)
	require.True(t, charge.Replayed)
	require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Jobs: 1}, s.stored(t))
}

// 429 rate_limited: the client waits at least the Retry-After the API sent
// (4 s at a rate of one request in four seconds), and the retry goes
// through. The API and the client share a fake clock, which the client's
// waits move forward: no test waits for real.
func TestRateLimitedRetryAfterIsAFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newFakeClock()
	s := start(t, func(o *app.Options) {
		o.API.RateLimit, o.API.RateBurst = 0.25, 1
		o.API.Now = clock.Now
	})
	c, seen := s.newClient(t, s.url, client.WithClock(clock))

	first, err := c.CreateCharge(ctx, visa(""))
	require.NoError(t, err)
	got, err := c.GetCharge(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, first.ID, got.ID)
	second, err := c.CreateCharge(ctx, visa(""))
	require.NoError(t, err)
	require.False(t, second.Replayed, "a 429 is never replayed: nothing was stored")

	exchanges := seen.exchanges()
	require.Equal(t, []int{201, 429, 200, 429, 201}, seen.statuses())
	require.Equal(t, 4*time.Second, exchanges[1].retryAfter)
	waits := clock.waits()
	require.Len(t, waits, 2)
	for i, wait := range waits {
		require.GreaterOrEqual(t, wait, exchanges[2*i+1].retryAfter, "wait %d", i)
	}
	require.Equal(t, stored{Charges: 2, IdempotencyKeys: 2, Jobs: 2}, s.stored(t))
}

// 503 database_unavailable: with the database refusing connections the
// client waits at least the API's Retry-After and tries again; once the
// database is back the charge is made, once. A client whose max elapsed
// time runs out first returns ErrOutcomeUnknown, wrapping the last answer.
func TestDatabaseUnavailableIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t)
	admin := dbtest.Admin(t)
	dbName := dbtest.DatabaseName(t, s.dbURL)
	allow := func(yes bool) {
		_, err := admin.Exec(ctx, `ALTER DATABASE "`+dbName+`" WITH ALLOW_CONNECTIONS `+map[bool]string{true: "true", false: "false"}[yes])
		require.NoError(t, err)
	}
	t.Cleanup(func() { allow(true) })

	// Warm the API's authentication cache, so the failure is the accept's.
	probe, _ := s.newClient(t, s.url)
	_, err := probe.ListCharges(ctx, client.ListChargesParams{})
	require.NoError(t, err)
	allow(false)
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, dbName)
	require.NoError(t, err)

	key := client.NewIdempotencyKey()
	impatientClock := newFakeClock()
	impatient, seen := s.newClient(t, s.url, client.WithClock(impatientClock), client.WithMaxElapsed(2500*time.Millisecond))
	_, err = impatient.CreateCharge(ctx, visa(key))
	require.ErrorIs(t, err, client.ErrOutcomeUnknown)
	require.ErrorIs(t, err, client.CodeDatabaseUnavailable, "the last answer is wrapped")
	requireNoSecrets(t, err, key, s.apiKey)
	require.Equal(t, []int{503, 503, 503}, seen.statuses(), "a third wait of at least 1 s would pass 2.5 s")
	for _, wait := range impatientClock.waits() {
		require.GreaterOrEqual(t, wait, time.Second)
	}

	clock := &testClock{onSleep: func(n int) {
		if n == 1 {
			allow(true)
		}
	}}
	c, seen := s.newClient(t, s.url, client.WithClock(clock))
	charge, err := c.CreateCharge(ctx, visa(key))
	require.NoError(t, err)
	require.False(t, charge.Replayed, "a 503 stored nothing, so the retry is the first to store")
	exchanges := seen.exchanges()
	require.Equal(t, []int{503, 201}, seen.statuses())
	require.Equal(t, time.Second, exchanges[0].retryAfter)
	require.Len(t, clock.waits(), 1)
	require.GreaterOrEqual(t, clock.waits()[0], time.Second)
	require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Jobs: 1}, s.stored(t))
}

// Every other 4xx is definitive: returned at once as a typed *Error, never
// retried, and nothing is stored. No error's text carries a key.
func TestDefinitiveRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t)
	clock := &testClock{}
	c, seen := s.newClient(t, s.url, client.WithClock(clock))

	pending, err := c.CreateCharge(ctx, visa(""))
	require.NoError(t, err)
	before := s.stored(t)
	reusedKey := client.NewIdempotencyKey()
	_, err = c.CreateCharge(ctx, visa(reusedKey))
	require.NoError(t, err)
	afterReused := s.stored(t)
	requests := len(seen.exchanges())

	changed := visa(reusedKey)
	changed.Amount = 2000
	badCurrency := visa("")
	badCurrency.Currency = "usd"
	card := visa("")
	card.PaymentMethod = "4111111111111111"
	shortKey := visa("too-short")
	zero := visa("")
	zero.Amount = 0

	cases := []struct {
		name   string
		call   func() error
		status int
		code   client.Code
		field  string
	}{
		{"InvalidField", func() error { _, err := c.CreateCharge(ctx, badCurrency); return err }, 400, client.CodeInvalidField, "currency"},
		{"ZeroAmount", func() error { _, err := c.CreateCharge(ctx, zero); return err }, 400, client.CodeInvalidField, "amount"},
		{"CardNumber", func() error { _, err := c.CreateCharge(ctx, card); return err }, 400, client.CodeCardNumberDetected, "payment_method"},
		{"KeyInvalid", func() error { _, err := c.CreateCharge(ctx, shortKey); return err }, 400, client.CodeIdempotencyKeyInvalid, ""},
		{"KeyReused", func() error { _, err := c.CreateCharge(ctx, changed); return err }, 422, client.CodeIdempotencyKeyReused, ""},
		{"NotFound", func() error { _, err := c.GetCharge(ctx, "ch_00000000000000000000000000"); return err }, 404, client.CodeNotFound, ""},
		{"RefundNotFound", func() error { _, err := c.GetRefund(ctx, "re_00000000000000000000000000"); return err }, 404, client.CodeNotFound, ""},
		{"RefundOfNoCharge", func() error {
			_, err := c.CreateRefund(ctx, client.RefundParams{Charge: "ch_00000000000000000000000000"})
			return err
		}, 404, client.CodeNotFound, "charge"},
		{"RefundOfPendingCharge", func() error {
			_, err := c.CreateRefund(ctx, client.RefundParams{Charge: pending.ID, Amount: 100})
			return err
		}, 409, client.CodeChargeNotRefundable, "charge"},
		{"RefundBadReason", func() error {
			_, err := c.CreateRefund(ctx, client.RefundParams{Charge: pending.ID, Reason: "changed_mind"})
			return err
		}, 400, client.CodeInvalidField, "reason"},
	}
	for _, tc := range cases {
		err := tc.call()
		apiErr := requireRefused(t, err, tc.status, tc.code)
		require.Equal(t, tc.field, apiErr.Field, "%s: %v", tc.name, err)
		require.NotEmpty(t, apiErr.Title, tc.name)
		require.NotEmpty(t, apiErr.Type, tc.name)
		requireNoSecrets(t, err, s.apiKey, reusedKey, card.PaymentMethod)
		requests++
		require.Len(t, seen.exchanges(), requests, "%s: one request, no retry", tc.name)
	}
	require.Empty(t, clock.waits(), "nothing waited: nothing was retried")
	require.Equal(t, afterReused, s.stored(t), "the refusals stored nothing")
	require.Equal(t, before.Charges+1, afterReused.Charges)

	// A key the API does not know is 401 and not retried either.
	stranger, err := client.New(s.url, "cfk_nobody_nothing", client.WithClock(clock))
	require.NoError(t, err)
	_, err = stranger.CreateCharge(ctx, visa(""))
	requireRefused(t, err, http.StatusUnauthorized, client.CodeUnauthorized)
	requireNoSecrets(t, err, "cfk_nobody_nothing")
	require.Empty(t, clock.waits())

	// errors.Is tells codes apart through wrapping.
	wrapped := errors.Join(errors.New("checkout"), err)
	require.ErrorIs(t, wrapped, client.CodeUnauthorized)
	require.NotErrorIs(t, wrapped, client.CodeNotFound)
}

// Refunds end to end, with the worker carrying charges and refunds to the
// provider: a refund made once per key, waited for until it succeeded, its
// replay, refund_exceeds_charge
// with nothing stored, the rest refunded by default, and a declined
// charge's charge_not_refundable.
func TestRefunds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := start(t)
	s.runWorker(t)
	c, _ := s.newClient(t, s.url)

	charge, err := c.CreateCharge(ctx, visa(""))
	require.NoError(t, err)
	charge, err = c.WaitForOutcome(ctx, charge.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusSucceeded, charge.Status)
	require.NotEmpty(t, charge.ProviderChargeID)

	key := client.NewIdempotencyKey()
	params := client.RefundParams{Charge: charge.ID, Amount: 400, Reason: client.RefundReasonRequestedByCustomer,
		Metadata: map[string]string{"ticket": "T-9"}, IdempotencyKey: key}
	refund, err := c.CreateRefund(ctx, params)
	require.NoError(t, err)
	require.False(t, refund.Replayed)
	require.True(t, strings.HasPrefix(refund.ID, "re_"), refund.ID)
	require.Equal(t, charge.ID, refund.Charge)
	require.Equal(t, int64(400), refund.Amount)
	require.Equal(t, "USD", refund.Currency)
	require.Equal(t, client.StatusPending, refund.Status)
	require.Equal(t, client.RefundReasonRequestedByCustomer, refund.Reason)
	require.Equal(t, map[string]string{"ticket": "T-9"}, refund.Metadata)

	settled, err := c.WaitForRefund(ctx, refund.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusSucceeded, settled.Status, "WaitForRefund polls until the provider refunded")
	require.Equal(t, refund.ID, settled.ID)
	require.NotEmpty(t, settled.ProviderRefundID)
	_, err = c.WaitForRefund(ctx, "re_00000000000000000000000000")
	requireRefused(t, err, http.StatusNotFound, client.CodeNotFound)

	again, err := c.CreateRefund(ctx, params)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, refund.ID, again.ID)

	before := s.stored(t)
	_, err = c.CreateRefund(ctx, client.RefundParams{Charge: charge.ID, Amount: 700})
	requireRefused(t, err, http.StatusConflict, client.CodeRefundExceedsCharge)
	require.Equal(t, before, s.stored(t), "refused: nothing stored")

	rest, err := c.CreateRefund(ctx, client.RefundParams{Charge: charge.ID})
	require.NoError(t, err)
	require.Equal(t, int64(600), rest.Amount, "no amount: what is left")
	_, err = c.CreateRefund(ctx, client.RefundParams{Charge: charge.ID, Amount: 1})
	requireRefused(t, err, http.StatusConflict, client.CodeRefundExceedsCharge)

	require.Eventually(t, func() bool {
		got, err := c.GetCharge(ctx, charge.ID)
		require.NoError(t, err)
		return got.AmountRefunded == 1000
	}, 30*time.Second, 50*time.Millisecond, "both refunds succeed at the provider")
	got, err := c.GetRefund(ctx, refund.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusSucceeded, got.Status)
	require.NotEmpty(t, got.ProviderRefundID)

	declined := visa("")
	declined.PaymentMethod = "pm_card_chargeDeclined"
	failed, err := c.CreateCharge(ctx, declined)
	require.NoError(t, err)
	failed, err = c.WaitForOutcome(ctx, failed.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusFailed, failed.Status)
	require.NotEmpty(t, failed.FailureCode)
	_, err = c.CreateRefund(ctx, client.RefundParams{Charge: failed.ID})
	requireRefused(t, err, http.StatusConflict, client.CodeChargeNotRefundable)
}

// WaitForOutcome polls through pending, submitting and unknown — the
// reconciler's business, not an outcome — and returns at needs_review. The
// test moves the charge itself, between the client's polls.
func TestWaitForOutcomeNeedsReview(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t)
	c, _ := s.newClient(t, s.url)
	charge, err := c.CreateCharge(ctx, visa(""))
	require.NoError(t, err)

	move := func(from, to intent.State, m intent.Move) {
		m.TenantID, m.ChargeID, m.From, m.To, m.Actor, m.Reason = s.tenantID, charge.ID, from, to, "test", "test_moves_it"
		_, err := intent.MoveCharge(ctx, s.pool, m)
		require.NoError(t, err)
	}
	clock := &testClock{onSleep: func(n int) {
		switch n {
		case 1:
			move(intent.StatePending, intent.StateSubmitting, intent.Move{CountAttempt: true})
		case 2:
			move(intent.StateSubmitting, intent.StateUnknown, intent.Move{CheckAfter: time.Hour})
		case 3:
			move(intent.StateUnknown, intent.StateNeedsReview, intent.Move{ReviewReason: "lookup_never_answered"})
		}
	}}
	waiting, seen := s.newClient(t, s.url, client.WithClock(clock))
	got, err := waiting.WaitForOutcome(ctx, charge.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusNeedsReview, got.Status)
	require.Equal(t, "lookup_never_answered", got.ReviewReason)
	require.Len(t, seen.exchanges(), 4, "pending, submitting, unknown, needs_review")
	require.Len(t, clock.waits(), 3)
}

// WaitForOutcome stops when its context does, and a charge that does not
// exist is a definitive not_found.
func TestWaitForOutcomeHonoursTheContext(t *testing.T) {
	t.Parallel()
	s := start(t) // no worker: the charge stays pending
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := &testClock{onSleep: func(n int) {
		if n == 3 {
			cancel()
		}
	}}
	c, seen := s.newClient(t, s.url, client.WithClock(clock))
	charge, err := c.CreateCharge(ctx, visa(""))
	require.NoError(t, err)

	_, err = c.WaitForOutcome(ctx, charge.ID)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, seen.exchanges(), 4, "the create and three polls")

	_, err = c.WaitForOutcome(context.Background(), "ch_00000000000000000000000000")
	requireRefused(t, err, http.StatusNotFound, client.CodeNotFound)

	// A create whose context is already over sends nothing it can be sure
	// of: the outcome is unknown.
	_, err = c.CreateCharge(ctx, visa(""))
	require.ErrorIs(t, err, client.ErrOutcomeUnknown)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Jobs: 1}, s.stored(t))
}

// An exchange observer sees every attempt of the calls made with its
// context — no answer (Status 0, Err), an answer lost after the API
// committed, the replay that ends the call — with each answer's body
// exactly as received, so a merchant can keep the first answer and find a
// later replay byte-identical. Calls made with another context are not
// observed, and a refusal is seen with its problem document.
func TestExchangeObserver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t)
	p := newProxy(t, s.url)
	clock := &testClock{}
	c, _ := s.newClient(t, p.url(), client.WithClock(clock))
	var seen []client.Exchange
	observed := client.WithExchangeObserver(ctx, func(e client.Exchange) {
		e.Body = append([]byte(nil), e.Body...)
		seen = append(seen, e)
	})

	p.down()
	clock.onSleep = func(n int) {
		if n == 1 {
			p.up(func(conn int) fate {
				if conn == 1 {
					return resetAfterAnswer
				}
				return pass
			})
		}
	}
	key := client.NewIdempotencyKey()
	charge, err := c.CreateCharge(observed, visa(key))
	require.NoError(t, err)
	require.Len(t, seen, 3, "refused, answer lost, replay")
	for i, e := range seen {
		require.Equal(t, http.MethodPost, e.Method)
		require.Equal(t, "/v1/charges", e.Path)
		require.Equal(t, i+1, e.Attempt)
	}
	require.Zero(t, seen[0].Status)
	require.Error(t, seen[0].Err)
	require.Nil(t, seen[0].Body)
	require.Zero(t, seen[1].Status, "the answer was cut short")
	require.Error(t, seen[1].Err)
	require.Equal(t, http.StatusCreated, seen[2].Status)
	require.True(t, seen[2].Replayed)
	require.NoError(t, seen[2].Err)
	require.Contains(t, string(seen[2].Body), `"id":"`+charge.ID+`"`)

	_, err = c.CreateCharge(ctx, visa(key))
	require.NoError(t, err)
	require.Len(t, seen, 3, "a call with another context is not observed")

	again, err := c.CreateCharge(observed, visa(key))
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Len(t, seen, 4)
	require.Equal(t, seen[2].Body, seen[3].Body, "a replay is the stored answer, byte for byte")

	other := visa(key)
	other.Amount = 999
	_, err = c.CreateCharge(observed, other)
	require.ErrorIs(t, err, client.CodeIdempotencyKeyReused)
	require.Len(t, seen, 5)
	require.Equal(t, http.StatusUnprocessableEntity, seen[4].Status)
	require.Contains(t, string(seen[4].Body), `"code":"idempotency_key_reused"`)
}
