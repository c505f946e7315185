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
	"github.com/chargeflow/chargeflow/psp"
)

// succeededCharge accepts a charge of amount USD minor units through the API
// as tenant tt and settles it as the worker would.
func (b *testBundle) succeededCharge(t *testing.T, tt testTenant, amount int64) string {
	t.Helper()
	resp := b.post(t, tt, fmt.Sprintf("charge-key-%012d-%s", amount, t.Name()[len(t.Name())-4:]),
		fmt.Sprintf(`{"amount": %d, "currency": "USD", "payment_method": "pm_card_visa"}`, amount))
	require.Equal(t, http.StatusCreated, resp.status, "body: %s", resp.body)
	id := decode(t, resp)["id"].(string)
	b.settle(t, tt, id, intent.StatePending, intent.StateSubmitting, intent.StateSucceeded)
	return id
}

// settle moves a charge or refund along states as the worker would.
func (b *testBundle) settle(t *testing.T, tt testTenant, id string, states ...intent.State) {
	t.Helper()
	for i := 1; i < len(states); i++ {
		_, err := intent.MoveCharge(context.Background(), b.pool, intent.Move{TenantID: tt.ID, ChargeID: id,
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
		if resp.status != http.StatusCreated {
			code = fmt.Sprint(decode(t, resp)["code"])
		}
		counts[fmt.Sprintf("%d %s", resp.status, code)]++
	}
	return counts
}

func TestCreateRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	chargeID := b.succeededCharge(t, b.tenantA, 1000)

	body := fmt.Sprintf(`{"charge": %q, "amount": 300, "reason": "requested_by_customer", "metadata": {"ticket": "T-1"}}`, chargeID)
	resp := b.refund(t, b.url, b.tenantA, "refund-key-0000000001", body)
	require.Equal(t, http.StatusCreated, resp.status, "body: %s", resp.body)
	refund := decode(t, resp)
	id := refund["id"].(string)
	require.True(t, strings.HasPrefix(id, "re_"))
	require.Equal(t, "/v1/refunds/"+id, resp.header.Get("Location"))
	require.Equal(t, map[string]any{"id": id, "charge": chargeID, "amount": 300.0, "currency": "USD", "status": "pending",
		"reason": "requested_by_customer", "metadata": map[string]any{"ticket": "T-1"}, "provider_refund_id": nil,
		"failure_code": nil, "attempts": 0.0, "created_at": refund["created_at"], "updated_at": refund["updated_at"],
		"review_reason": nil}, refund)
	require.Equal(t, 1, b.jobsFor(t, id), "the refund's job, written with it")

	// The contract of charges: a replay byte for byte, another body 422.
	replay := b.refund(t, b.url, b.tenantA, "refund-key-0000000001", body)
	require.Equal(t, http.StatusCreated, replay.status)
	require.Equal(t, resp.body, replay.body)
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	require.Equal(t, "/v1/refunds/"+id, replay.header.Get("Location"))
	requireProblem(t, b.refund(t, b.url, b.tenantA, "refund-key-0000000001", strings.Replace(body, "300", "301", 1)),
		http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	// A charge's key on a refund is another request, too.
	requireProblem(t, b.refund(t, b.url, b.tenantA, "charge-key-000000001000-fund", body), http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)

	got := b.get(t, b.tenantA, "/v1/refunds/"+id)
	require.Equal(t, http.StatusOK, got.status)
	require.Equal(t, id, decode(t, got)["id"])
	requireProblem(t, b.get(t, b.tenantB, "/v1/refunds/"+id), http.StatusNotFound, api.CodeNotFound)
	requireProblem(t, b.get(t, b.tenantA, "/v1/refunds/"+chargeID), http.StatusNotFound, api.CodeNotFound)

	// No amount: what is left (700), reserved at once.
	rest := b.refund(t, b.url, b.tenantA, "refund-key-0000000002", fmt.Sprintf(`{"charge": %q}`, chargeID))
	require.Equal(t, http.StatusCreated, rest.status, "body: %s", rest.body)
	require.EqualValues(t, 700, decode(t, rest)["amount"])
	requireProblem(t, b.refund(t, b.url, b.tenantA, "refund-key-0000000003", fmt.Sprintf(`{"charge": %q}`, chargeID)),
		http.StatusConflict, api.CodeRefundExceedsCharge)

	list := b.get(t, b.tenantA, "/v1/charges/"+chargeID+"/refunds")
	require.Equal(t, http.StatusOK, list.status)
	var page struct {
		Data []map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(list.body, &page))
	require.Len(t, page.Data, 2)
	require.Equal(t, decode(t, rest)["id"], page.Data[0]["id"], "newest first")
	requireProblem(t, b.get(t, b.tenantB, "/v1/charges/"+chargeID+"/refunds"), http.StatusNotFound, api.CodeNotFound)

	// amount_refunded counts succeeded refunds only; a tenant's charge list
	// holds no refunds.
	charge := decode(t, b.get(t, b.tenantA, "/v1/charges/"+chargeID))
	require.EqualValues(t, 0, charge["amount_refunded"])
	b.settle(t, b.tenantA, id, intent.StatePending, intent.StateSubmitting, intent.StateSucceeded)
	charge = decode(t, b.get(t, b.tenantA, "/v1/charges/"+chargeID))
	require.EqualValues(t, 300, charge["amount_refunded"])
	require.Len(t, decode(t, b.get(t, b.tenantA, "/v1/charges"))["data"], 1)
}

// Every refusal answers its code and stores nothing: no refund, event,
// idempotency record or job (and so no provider call).
func TestCreateRefundRejections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	charge := b.succeededCharge(t, b.tenantA, 1000)
	pendingResp := b.post(t, b.tenantA, "pending-charge-key-01", validBody)
	require.Equal(t, http.StatusCreated, pendingResp.status)
	pending := decode(t, pendingResp)["id"].(string)
	declinedResp := b.post(t, b.tenantA, "declined-charge-key-1", validBody)
	declined := decode(t, declinedResp)["id"].(string)
	b.settle(t, b.tenantA, declined, intent.StatePending, intent.StateFailed)
	other := b.succeededCharge(t, b.tenantB, 1000)
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
			before := b.stored(t)
			p := requireProblem(t, b.refund(t, b.url, b.tenantA, tc.key, tc.body), tc.status, tc.code)
			if tc.field != "" {
				require.Equal(t, tc.field, p["field"])
			}
			require.NotContains(t, fmt.Sprint(p), "4242", "a card number is never echoed")
			require.Equal(t, before, b.stored(t), "nothing stored")
		})
	}
}

// 200 concurrent one-unit refunds with different keys against a 100-unit
// charge, through two API processes on one database: exactly 100 accepted.
func TestConcurrentRefundsNeverExceedTheCharge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	charge := b.succeededCharge(t, b.tenantA, 100)
	urls := []string{b.url, b.serve(t, b.cfg)}

	statuses := make([]response, 200)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Go(func() {
			statuses[i] = b.refund(t, urls[i%2], b.tenantA, fmt.Sprintf("concurrent-refund-%04d", i), fmt.Sprintf(`{"charge": %q, "amount": 1}`, charge))
		})
	}
	wg.Wait()
	require.Equal(t, map[string]int{"201 ": 100, "409 refund_exceeds_charge": 100}, countAnswers(t, statuses))

	var refunds, reserved, jobs int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT
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
	chargeID := b.newCharge(t, b.tenantA, "ops-refund-charge-01")
	b.walk(t, b.tenantA, chargeID, intent.StateSubmitting)
	providerCharge := b.chargeAtProvider(t, chargeID, 1000, "USD")
	_, err := intent.MoveCharge(context.Background(), b.pool, intent.Move{TenantID: b.tenantA.ID, ChargeID: chargeID,
		From: intent.StateSubmitting, To: intent.StateSucceeded, Actor: "test", Reason: "test", ProviderChargeID: providerCharge})
	require.NoError(t, err)

	resp := b.refund(t, b.url, b.tenantA, "ops-refund-key-00001", fmt.Sprintf(`{"charge": %q, "amount": 250}`, chargeID))
	require.Equal(t, http.StatusCreated, resp.status, "body: %s", resp.body)
	refundID := decode(t, resp)["id"].(string)
	b.walk(t, b.tenantA, refundID, intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)
	// The lost call did reach the provider.
	applied, err := psp.NewClient(psp.Config{BaseURL: b.psp.URL}).Refund(context.Background(), psp.RefundRequest{
		Key: intent.ProviderKeyFor(refundID), Charge: providerCharge, Amount: 250, Currency: "USD", Reference: refundID})
	require.NoError(t, err)

	view, _ := b.opsCharge(t, refundID)
	require.Equal(t, "refund", view["kind"])
	require.Equal(t, chargeID, view["refund_of"])

	refused := b.resolve(t, b.admin.Token, refundID, `{"status": "failed", "evidence": "customer says no refund arrived"}`)
	requireProblem(t, refused, http.StatusConflict, api.CodeEvidenceMismatch)
	require.Equal(t, "needs_review", decode(t, b.get(t, b.tenantA, "/v1/refunds/"+refundID))["status"], "a refusal changes nothing")

	done := b.resolve(t, b.admin.Token, refundID, `{"status": "succeeded", "provider_charge_id": "`+applied.ID+`", "evidence": "the refund is in the provider's dashboard"}`)
	require.Equal(t, http.StatusOK, done.status, "body: %s", done.body)
	refund := decode(t, b.get(t, b.tenantA, "/v1/refunds/"+refundID))
	require.Equal(t, []any{"succeeded", applied.ID}, []any{refund["status"], refund["provider_refund_id"]})
	require.EqualValues(t, 250, decode(t, b.get(t, b.tenantA, "/v1/charges/"+chargeID))["amount_refunded"])
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

// A retry of a refund of all that is left, whose first attempt commits
// between the retry's replay check and its read of the charge, sees
// nothing left: it must answer the first attempt's refund, not
// refund_exceeds_charge — a merchant told that would think the refund
// was never made.
func TestRefundRetryRacingItsFirstAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	charge := b.succeededCharge(t, b.tenantA, 1000)
	body := `{"charge": "` + charge + `"}`
	const key = "refund-race-key-0001"

	var first response
	tracer := &raceTracer{}
	tracer.hook = func() { first = b.refund(t, b.url, b.tenantA, key, body) }
	poolCfg, err := pgxpool.ParseConfig(b.dbURL)
	require.NoError(t, err)
	poolCfg.ConnConfig.Tracer = tracer
	traced, err := pgxpool.NewWithConfig(t.Context(), poolCfg)
	require.NoError(t, err)
	t.Cleanup(traced.Close)
	cfg := b.cfg
	cfg.DB = traced
	racing := b.serve(t, cfg)

	tracer.armed.Store(true)
	retry := b.refund(t, racing, b.tenantA, key, body)
	require.False(t, tracer.armed.Load(), "the first attempt ran inside the retry")
	require.Equal(t, http.StatusCreated, first.status, "body: %s", first.body)
	require.Equal(t, http.StatusCreated, retry.status, "body: %s", retry.body)
	require.Equal(t, "true", retry.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.body, retry.body, "the retry is answered the first attempt's refund, byte for byte")
	var refunds int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM charges WHERE parent_id = $1`, charge).Scan(&refunds))
	require.Equal(t, 1, refunds)
}
