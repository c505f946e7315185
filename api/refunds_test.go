package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/psp"
)

// succeededCharge accepts a charge of amount USD minor units through the API
// as tenant tt and settles it as the worker would.
func (b *testBundle) succeededCharge(t *testing.T, tt testTenant, amount int64) string {
	t.Helper()
	resp := b.Post(t, tt, fmt.Sprintf("charge-key-%012d-%s", amount, t.Name()[len(t.Name())-4:]),
		fmt.Sprintf(`{"amount": %d, "currency": "USD", "payment_method": "pm_card_visa"}`, amount))
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	id := apitest.Decode(t, resp)["id"].(string)
	b.settle(t, tt, id, intent.StatePending, intent.StateSubmitting, intent.StateSucceeded)
	return id
}

// settle moves a charge or refund along states as the worker would.
func (b *testBundle) settle(t *testing.T, tt testTenant, id string, states ...intent.State) {
	t.Helper()
	for i := 1; i < len(states); i++ {
		_, err := intent.MoveCharge(context.Background(), b.Pool, intent.Move{TenantID: tt.ID, ChargeID: id,
			From: states[i-1], To: states[i], Actor: "worker", Reason: "test",
			CountAttempt: states[i] == intent.StateSubmitting, ProviderChargeID: "py_" + id[3:], FailureCode: "test"})
		require.NoError(t, err)
	}
}

// countAnswers counts answers by status and problem code ("201 " for a
// 201).
func countAnswers(t *testing.T, answers []response) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for _, resp := range answers {
		code := ""
		if resp.Status != http.StatusCreated {
			code = fmt.Sprint(apitest.Decode(t, resp)["code"])
		}
		counts[fmt.Sprintf("%d %s", resp.Status, code)]++
	}
	return counts
}

func TestCreateRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	chargeID := b.succeededCharge(t, b.TenantA, 1000)

	body := fmt.Sprintf(`{"charge": %q, "amount": 300, "reason": "requested_by_customer", "metadata": {"ticket": "T-1"}}`, chargeID)
	resp := b.Refund(t, b.URL, b.TenantA, "refund-key-0000000001", body)
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	refund := apitest.Decode(t, resp)
	id := refund["id"].(string)
	require.True(t, strings.HasPrefix(id, "re_"))
	require.Equal(t, "/v1/refunds/"+id, resp.Header.Get("Location"))
	require.Equal(t, map[string]any{"id": id, "charge": chargeID, "amount": 300.0, "currency": "USD", "status": "pending",
		"reason": "requested_by_customer", "metadata": map[string]any{"ticket": "T-1"}, "provider_refund_id": nil,
		"failure_code": nil, "attempts": 0.0, "created_at": refund["created_at"], "updated_at": refund["updated_at"],
		"review_reason": nil}, refund)
	require.Equal(t, 1, b.JobsFor(t, id), "the refund's job, written with it")

	// The contract of charges: a replay byte for byte, another body 422.
	replay := b.Refund(t, b.URL, b.TenantA, "refund-key-0000000001", body)
	require.Equal(t, http.StatusCreated, replay.Status)
	require.Equal(t, resp.Body, replay.Body)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "/v1/refunds/"+id, replay.Header.Get("Location"))
	apitest.RequireProblem(t, b.Refund(t, b.URL, b.TenantA, "refund-key-0000000001", strings.Replace(body, "300", "301", 1)),
		http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	// A charge's key on a refund is another request, too.
	apitest.RequireProblem(t, b.Refund(t, b.URL, b.TenantA, "charge-key-000000001000-fund", body), http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)

	got := b.Get(t, b.TenantA, "/v1/refunds/"+id)
	require.Equal(t, http.StatusOK, got.Status)
	require.Equal(t, id, apitest.Decode(t, got)["id"])
	apitest.RequireProblem(t, b.Get(t, b.TenantB, "/v1/refunds/"+id), http.StatusNotFound, api.CodeNotFound)
	apitest.RequireProblem(t, b.Get(t, b.TenantA, "/v1/refunds/"+chargeID), http.StatusNotFound, api.CodeNotFound)

	// No amount: what is left (700), reserved at once.
	rest := b.Refund(t, b.URL, b.TenantA, "refund-key-0000000002", fmt.Sprintf(`{"charge": %q}`, chargeID))
	require.Equal(t, http.StatusCreated, rest.Status, "body: %s", rest.Body)
	require.EqualValues(t, 700, apitest.Decode(t, rest)["amount"])
	apitest.RequireProblem(t, b.Refund(t, b.URL, b.TenantA, "refund-key-0000000003", fmt.Sprintf(`{"charge": %q}`, chargeID)),
		http.StatusConflict, api.CodeRefundExceedsCharge)

	list := b.Get(t, b.TenantA, "/v1/charges/"+chargeID+"/refunds")
	require.Equal(t, http.StatusOK, list.Status)
	var page struct {
		Data []map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(list.Body, &page))
	require.Len(t, page.Data, 2)
	require.Equal(t, apitest.Decode(t, rest)["id"], page.Data[0]["id"], "newest first")
	apitest.RequireProblem(t, b.Get(t, b.TenantB, "/v1/charges/"+chargeID+"/refunds"), http.StatusNotFound, api.CodeNotFound)

	// amount_refunded counts succeeded refunds only; a tenant's charge list
	// holds no refunds.
	charge := apitest.Decode(t, b.Get(t, b.TenantA, "/v1/charges/"+chargeID))
	require.EqualValues(t, 0, charge["amount_refunded"])
	b.settle(t, b.TenantA, id, intent.StatePending, intent.StateSubmitting, intent.StateSucceeded)
	charge = apitest.Decode(t, b.Get(t, b.TenantA, "/v1/charges/"+chargeID))
	require.EqualValues(t, 300, charge["amount_refunded"])
	require.Len(t, apitest.Decode(t, b.Get(t, b.TenantA, "/v1/charges"))["data"], 1)
}

// Every refusal answers its code and stores nothing: no refund, event,
// idempotency record or job (and so no provider call).
func TestCreateRefundRejections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	charge := b.succeededCharge(t, b.TenantA, 1000)
	pendingResp := b.Post(t, b.TenantA, "pending-charge-key-01", apitest.ValidBody)
	require.Equal(t, http.StatusCreated, pendingResp.Status)
	pending := apitest.Decode(t, pendingResp)["id"].(string)
	declinedResp := b.Post(t, b.TenantA, "declined-charge-key-1", apitest.ValidBody)
	declined := apitest.Decode(t, declinedResp)["id"].(string)
	b.settle(t, b.TenantA, declined, intent.StatePending, intent.StateFailed)
	other := b.succeededCharge(t, b.TenantB, 1000)
	ok := func(extra string) string { return fmt.Sprintf(`{"charge": %q%s}`, charge, extra) }

	for _, tc := range []struct {
		name, key, body string
		status          int
		code            api.Code
		field           string
	}{
		{"no key", "", ok(""), 400, api.CodeIdempotencyKeyMissing, ""},
		{"not JSON", "rejection-key-000001", `{"charge":`, 400, api.CodeInvalidJSON, ""},
		{"unknown field", "rejection-key-000002", ok(`, "currency": "USD"`), 400, api.CodeUnknownField, "currency"},
		{"no charge", "rejection-key-000003", `{"amount": 5}`, 400, api.CodeMissingField, "charge"},
		{"not a charge id", "rejection-key-000004", `{"charge": "re_0000000000000000000000000a"}`, 400, api.CodeInvalidField, "charge"},
		{"zero amount", "rejection-key-000005", ok(`, "amount": 0`), 400, api.CodeInvalidField, "amount"},
		{"fractional amount", "rejection-key-000006", ok(`, "amount": 1.5`), 400, api.CodeInvalidField, "amount"},
		{"unknown reason", "rejection-key-000007", ok(`, "reason": "changed_mind"`), 400, api.CodeInvalidField, "reason"},
		{"card number in metadata", "rejection-key-000008", ok(`, "metadata": {"note": "4242 4242 4242 4242"}`), 400, api.CodeCardNumberDetected, "metadata.note"},
		{"unknown charge", "rejection-key-000009", `{"charge": "ch_0000000000000000000000000a"}`, 404, api.CodeNotFound, "charge"},
		{"another tenant's charge", "rejection-key-000010", fmt.Sprintf(`{"charge": %q}`, other), 404, api.CodeNotFound, "charge"},
		{"pending charge", "rejection-key-000011", fmt.Sprintf(`{"charge": %q}`, pending), 409, api.CodeChargeNotRefundable, "charge"},
		{"declined charge", "rejection-key-000012", fmt.Sprintf(`{"charge": %q}`, declined), 409, api.CodeChargeNotRefundable, "charge"},
		{"beyond the charge", "rejection-key-000013", ok(`, "amount": 1001`), 409, api.CodeRefundExceedsCharge, "amount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.Stored(t)
			p := apitest.RequireProblem(t, b.Refund(t, b.URL, b.TenantA, tc.key, tc.body), tc.status, tc.code)
			if tc.field != "" {
				require.Equal(t, tc.field, p["field"])
			}
			require.NotContains(t, fmt.Sprint(p), "4242", "a card number is never echoed")
			require.Equal(t, before, b.Stored(t), "nothing stored")
		})
	}
}

// 200 concurrent one-unit refunds with different keys against a 100-unit
// charge, through two API processes on one database: exactly 100 accepted.
func TestConcurrentRefundsNeverExceedTheCharge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	charge := b.succeededCharge(t, b.TenantA, 100)
	urls := []string{b.URL, b.Serve(t, b.Config)}

	statuses := make([]response, 200)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Go(func() {
			statuses[i] = b.Refund(t, urls[i%2], b.TenantA, fmt.Sprintf("concurrent-refund-%04d", i), fmt.Sprintf(`{"charge": %q, "amount": 1}`, charge))
		})
	}
	wg.Wait()
	require.Equal(t, map[string]int{"201 ": 100, "409 refund_exceeds_charge": 100}, countAnswers(t, statuses))

	var refunds, reserved, jobs int
	require.NoError(t, b.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM charges WHERE parent_id = $1), (SELECT amount_reserved FROM charges WHERE id = $1),
		(SELECT count(*) FROM river_job j JOIN charges c ON c.id = j.args->>'charge_id' WHERE c.parent_id = $1)`, charge).
		Scan(&refunds, &reserved, &jobs))
	require.Equal(t, []int{100, 100, 100}, []int{refunds, reserved, jobs})
}

// Operators resolve a refund as they resolve a charge, on the same routes,
// and the provider's records decide: a refund the provider applied can be
// resolved succeeded (the charge's amount_refunded follows), never failed.
func TestOpsResolveRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	chargeID := b.NewCharge(t, b.TenantA, "ops-refund-charge-01")
	b.Walk(t, b.TenantA, chargeID, intent.StateSubmitting)
	providerCharge := b.ChargeAtProvider(t, chargeID, 1000, "USD")
	_, err := intent.MoveCharge(context.Background(), b.Pool, intent.Move{TenantID: b.TenantA.ID, ChargeID: chargeID,
		From: intent.StateSubmitting, To: intent.StateSucceeded, Actor: "test", Reason: "test", ProviderChargeID: providerCharge})
	require.NoError(t, err)

	resp := b.Refund(t, b.URL, b.TenantA, "ops-refund-key-00001", fmt.Sprintf(`{"charge": %q, "amount": 250}`, chargeID))
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	refundID := apitest.Decode(t, resp)["id"].(string)
	b.Walk(t, b.TenantA, refundID, intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)
	// The lost call did reach the provider.
	applied, err := psp.NewClient(psp.Config{BaseURL: b.psp.URL}).Refund(context.Background(), psp.RefundRequest{
		Key: intent.ProviderKeyFor(refundID), Charge: providerCharge, Amount: 250, Currency: "USD", Reference: refundID})
	require.NoError(t, err)

	view, _ := b.OpsCharge(t, refundID)
	require.Equal(t, "refund", view["kind"])
	require.Equal(t, chargeID, view["refund_of"])

	refused := b.Resolve(t, b.Admin.Token, refundID, `{"status": "failed", "evidence": "customer says no refund arrived"}`)
	apitest.RequireProblem(t, refused, http.StatusConflict, api.CodeEvidenceMismatch)
	require.Equal(t, "needs_review", apitest.Decode(t, b.Get(t, b.TenantA, "/v1/refunds/"+refundID))["status"], "a refusal changes nothing")

	done := b.Resolve(t, b.Admin.Token, refundID, `{"status": "succeeded", "provider_charge_id": "`+applied.ID+`", "evidence": "the refund is in the provider's dashboard"}`)
	require.Equal(t, http.StatusOK, done.Status, "body: %s", done.Body)
	refund := apitest.Decode(t, b.Get(t, b.TenantA, "/v1/refunds/"+refundID))
	require.Equal(t, []any{"succeeded", applied.ID}, []any{refund["status"], refund["provider_refund_id"]})
	require.EqualValues(t, 250, apitest.Decode(t, b.Get(t, b.TenantA, "/v1/charges/"+chargeID))["amount_refunded"])
}

// raceTracer runs hook once, right after the first read of an idempotency
// record through its pool: the moment between a request's replay check and
// the rest of its work.
type raceTracer struct {
	armed atomic.Bool
	hook  func()
}

type tracedSQL struct{}

func (r *raceTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, tracedSQL{}, data.SQL)
}

func (r *raceTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	sql, _ := ctx.Value(tracedSQL{}).(string)
	if strings.Contains(sql, "FROM idempotency_keys WHERE") && r.armed.CompareAndSwap(true, false) {
		r.hook()
	}
}

// requireRetryRacingItsFirstAttempt sends a request with send (to the
// API at the URL it is given) as a retry through a second API process,
// whose first read of an idempotency record — the retry's replay check —
// sends the first attempt through the bundle's own process and waits for
// its answer. The retry must be answered the first attempt's answer, byte
// for byte, and charge must have one row acting on it, the first
// attempt's.
func (b *testBundle) requireRetryRacingItsFirstAttempt(t *testing.T, charge string, send func(baseURL string) response) {
	t.Helper()
	var first response
	tracer := &raceTracer{}
	tracer.hook = func() { first = send(b.URL) }
	poolCfg, err := pgxpool.ParseConfig(b.DBURL)
	require.NoError(t, err)
	poolCfg.ConnConfig.Tracer = tracer
	traced, err := pgxpool.NewWithConfig(t.Context(), poolCfg)
	require.NoError(t, err)
	t.Cleanup(traced.Close)
	cfg := b.Config
	cfg.DB = traced
	racing := b.Serve(t, cfg)

	tracer.armed.Store(true)
	retry := send(racing)
	require.False(t, tracer.armed.Load(), "the first attempt ran inside the retry")
	require.Equal(t, http.StatusCreated, first.Status, "body: %s", first.Body)
	require.Equal(t, http.StatusCreated, retry.Status, "body: %s", retry.Body)
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first.Body, retry.Body, "the retry is answered the first attempt's answer, byte for byte")
	var children int
	require.NoError(t, b.Pool.QueryRow(t.Context(), `SELECT count(*) FROM charges WHERE parent_id = $1`, charge).Scan(&children))
	require.Equal(t, 1, children)
}

// A retry of a refund of all that is left, whose first attempt commits
// between the retry's replay check and its read of the charge, sees
// nothing left: it must answer the first attempt's refund, not
// refund_exceeds_charge — a merchant told that would think the refund
// was never made.
func TestRefundRetryRacingItsFirstAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	charge := b.succeededCharge(t, b.TenantA, 1000)
	body := `{"charge": "` + charge + `"}`
	const key = "refund-race-key-0001"

	b.requireRetryRacingItsFirstAttempt(t, charge, func(baseURL string) response {
		return b.Refund(t, baseURL, b.TenantA, key, body)
	})
}
