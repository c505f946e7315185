package fakepsp_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp"
)

func TestRefund(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setup(t, fakepsp.Config{Now: clock.Now})
	charge := b.charge(t, psp.ChargeRequest{Key: "pk_1", Amount: 1000, Currency: "EUR", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_1", Tag: "tenant-a"})
	clock.Advance(time.Second)

	resp := b.do(t, http.MethodPost, "/v1/refunds", http.Header{"Idempotency-Key": {"rk_1"}, "X-Tenant-Tag": {"tenant-a"}},
		`{"charge":"`+charge.ID+`","amount":400,"reference":"re_1","reason":"requested_by_customer"}`)
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	require.Empty(t, resp.header.Get("Idempotent-Replayed"))
	var fields map[string]any
	require.NoError(t, json.Unmarshal(resp.body, &fields))
	require.ElementsMatch(t, []string{"id", "status", "charge", "amount", "currency", "reference", "created_at"}, keysOf(fields),
		"psp.Refund's wire format and created_at, nothing else")
	var first refundAnswer
	require.NoError(t, json.Unmarshal(resp.body, &first))
	require.True(t, strings.HasPrefix(first.ID, "rf_"), first.ID)
	require.Equal(t, psp.Refund{ID: first.ID, Status: psp.StatusSucceeded, Charge: charge.ID, Amount: 400, Currency: "EUR", Reference: "re_1"}, first.Refund,
		"the currency is the charge's")
	require.Equal(t, clock.Now(), first.CreatedAt)

	// A second, partial refund takes what is left.
	clock.Advance(time.Second)
	second := b.refund(t, "rk_2", charge.ID, 600)

	// The lookup by key shows the refund as the answer did.
	lookup := b.refundLookup(t, "rk_1")
	require.Equal(t, http.StatusOK, lookup.status, "body: %s", lookup.body)
	require.JSONEq(t, string(resp.body), string(lookup.body))

	// The ledger files both under their charge.
	require.Equal(t, []fakepsp.LedgerEntry{{
		ID: charge.ID, IdempotencyKey: "pk_1", Reference: "ch_1", Amount: 1000, Currency: "EUR", Status: psp.StatusSucceeded,
		TenantTag: "tenant-a", CreatedAt: clock.Now().Add(-2 * time.Second),
		Refunds: []fakepsp.RefundEntry{
			{ID: first.ID, IdempotencyKey: "rk_1", Reference: "re_1", Charge: charge.ID, Amount: 400, Currency: "EUR",
				Status: psp.StatusSucceeded, Reason: "requested_by_customer", TenantTag: "tenant-a", CreatedAt: first.CreatedAt},
			{ID: second.ID, IdempotencyKey: "rk_2", Reference: "re_rk_2", Charge: charge.ID, Amount: 600, Currency: "EUR",
				Status: psp.StatusSucceeded, CreatedAt: second.CreatedAt},
		},
	}}, b.ledger(t, false))
	require.Equal(t, b.provider.Refunds(), b.refunds(t))
}

// keysOf returns the keys of a decoded JSON object.
func keysOf(object map[string]any) []string {
	keys := make([]string, 0, len(object))
	for key := range object {
		keys = append(keys, key)
	}
	return keys
}

func TestRefundReplaysAKnownKey(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	charge := b.charge(t, visa("pk_1"))
	body := refundBody(charge.ID, 300, "re_1")

	first := b.postRefund(t, "rk_replay", body)
	require.Equal(t, http.StatusOK, first.status, "body: %s", first.body)
	second := b.postRefund(t, "rk_replay", body)
	require.Equal(t, http.StatusOK, second.status)
	require.Equal(t, "true", second.header.Get("Idempotent-Replayed"))
	require.Equal(t, string(first.body), string(second.body))

	require.Len(t, b.refunds(t), 1)
}

func TestRefundKeyReusedWithDifferentParameters(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	charge := b.charge(t, visa("pk_1"))
	refund := b.refund(t, "rk_reused", charge.ID, 300)
	before := b.ledger(t, true)

	for name, tt := range map[string]struct{ key, body string }{
		"another amount":        {"rk_reused", refundBody(charge.ID, 301, "re_rk_reused")},
		"another reference":     {"rk_reused", refundBody(charge.ID, 300, "re_other")},
		"a reason added":        {"rk_reused", `{"charge":"` + charge.ID + `","amount":300,"reference":"re_rk_reused","reason":"duplicate"}`},
		"a charge's key reused": {"pk_1", refundBody(charge.ID, 300, "re_rk_reused")},
	} {
		resp := b.postRefund(t, tt.key, tt.body)
		require.Equal(t, http.StatusConflict, resp.status, "%s: %s", name, resp.body)
		require.Equal(t, "idempotency_key_reused", resp.errorCode(t), name)
	}

	// A refund's key reused for a charge is refused the same way: keys are
	// one namespace, as at Stripe.
	_, err := b.client.Charge(t.Context(), visa("rk_reused"))
	pspErr := requirePSPError(t, err, psp.ErrUnknownOutcome, "status_409")
	require.Equal(t, "idempotency_key_reused", pspErr.ProviderCode)

	require.Equal(t, before, b.ledger(t, true), "nothing was applied")
	require.Equal(t, []string{refund.ID}, refundIDs(b.refunds(t)))
}

// refundIDs returns the ids of refunds.
func refundIDs(refunds []fakepsp.RefundEntry) []string {
	ids := []string{}
	for _, refund := range refunds {
		ids = append(ids, refund.ID)
	}
	return ids
}

// Every refusal is a 409 with its code, applies nothing, and is the key's
// saved answer: a replay gets it again, the key is not free for another
// request, and a lookup by the key proves that no refund exists.
func TestRefundRefusals(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		// prepare makes the ledger the refused request meets and returns
		// the charge id it refunds.
		prepare func(t *testing.T, b *testBundle) string
		amount  int64
		code    string
	}{
		{"more than the charge", func(t *testing.T, b *testBundle) string {
			return b.charge(t, visa("pk_1")).ID
		}, 1001, "refund_exceeds_charge"},
		{"more than is left", func(t *testing.T, b *testBundle) string {
			charge := b.charge(t, visa("pk_1"))
			b.refund(t, "rk_first", charge.ID, 600)
			return charge.ID
		}, 401, "refund_exceeds_charge"},
		{"refunded in full", func(t *testing.T, b *testBundle) string {
			charge := b.charge(t, visa("pk_1"))
			b.refund(t, "rk_first", charge.ID, 1000)
			return charge.ID
		}, 1, "refund_exceeds_charge"},
		{"a charge the provider does not hold", func(t *testing.T, b *testBundle) string {
			b.charge(t, visa("pk_1"))
			return "py_nothing"
		}, 100, "charge_not_refundable"},
		{"a declined charge", func(t *testing.T, b *testBundle) string {
			declined := b.charge(t, psp.ChargeRequest{Key: "pk_d", Amount: 1000, Currency: "USD", PaymentMethod: fakepsp.PaymentMethodDeclined, Reference: "ch_d"})
			require.Equal(t, psp.StatusFailed, declined.Status)
			return declined.ID
		}, 100, "charge_not_refundable"},
		{"a refund's id instead of a charge's", func(t *testing.T, b *testBundle) string {
			charge := b.charge(t, visa("pk_1"))
			return b.refund(t, "rk_first", charge.ID, 100).ID
		}, 100, "charge_not_refundable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setup(t, fakepsp.Config{})
			charge := tt.prepare(t, b)
			before := b.ledger(t, true)
			body := refundBody(charge, tt.amount, "re_refused")

			resp := b.postRefund(t, "rk_refused", body)
			require.Equal(t, http.StatusConflict, resp.status, "body: %s", resp.body)
			require.Equal(t, tt.code, resp.errorCode(t))
			require.Empty(t, resp.header.Get("Idempotent-Replayed"))
			require.Equal(t, before, b.ledger(t, true), "nothing was applied")

			again := b.postRefund(t, "rk_refused", body)
			require.Equal(t, http.StatusConflict, again.status)
			require.Equal(t, "true", again.header.Get("Idempotent-Replayed"), "the refusal is the key's saved answer")
			require.Equal(t, string(resp.body), string(again.body))

			other := b.postRefund(t, "rk_refused", refundBody(charge, tt.amount, "re_other"))
			require.Equal(t, http.StatusConflict, other.status)
			require.Equal(t, "idempotency_key_reused", other.errorCode(t))

			require.False(t, b.refundFound(t, "rk_refused"), "no refund exists for the key")
			require.Equal(t, before, b.ledger(t, true), "still nothing applied")
		})
	}
}

func TestRefundValidation(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	charge := b.charge(t, visa("pk_1"))
	before := b.ledger(t, true)
	valid := refundBody(charge.ID, 100, "re_1")
	tests := []struct {
		name   string
		header http.Header
		body   string
		status int
		code   string
	}{
		{"missing key", http.Header{}, valid, 400, "idempotency_key_missing"},
		{"repeated key", http.Header{"Idempotency-Key": {"a", "b"}}, valid, 400, "idempotency_key_invalid"},
		{"key too long", http.Header{"Idempotency-Key": {strings.Repeat("k", 256)}}, valid, 400, "idempotency_key_invalid"},
		{"not json", nil, `charge=py_1`, 400, "invalid_json"},
		{"unknown field", nil, `{"charge":"` + charge.ID + `","amount":100,"reference":"re_1","currency":"USD"}`, 400, "invalid_json"},
		{"trailing data", nil, valid + `{}`, 400, "invalid_json"},
		{"charge missing", nil, `{"amount":100,"reference":"re_1"}`, 400, "parameter_invalid"},
		{"amount missing", nil, `{"charge":"` + charge.ID + `","reference":"re_1"}`, 400, "parameter_invalid"},
		{"amount zero", nil, refundBody(charge.ID, 0, "re_1"), 400, "parameter_invalid"},
		{"amount negative", nil, refundBody(charge.ID, -5, "re_1"), 400, "parameter_invalid"},
		{"amount string", nil, `{"charge":"` + charge.ID + `","amount":"100","reference":"re_1"}`, 400, "parameter_invalid"},
		{"reference missing", nil, `{"charge":"` + charge.ID + `","amount":100}`, 400, "parameter_invalid"},
		{"unknown reason", nil, `{"charge":"` + charge.ID + `","amount":100,"reference":"re_1","reason":"changed_mind"}`, 400, "parameter_invalid"},
		{"body too large", nil, `{"reference":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "request_too_large"},
	}
	t.Cleanup(func() {
		require.Equal(t, before, b.provider.Ledger(true), "nothing was applied")
	})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			key := fmt.Sprintf("rk_invalid_%d", i)
			header := tt.header
			if header == nil {
				header = http.Header{"Idempotency-Key": {key}}
			}
			resp := b.do(t, http.MethodPost, "/v1/refunds", header, tt.body)
			require.Equal(t, tt.status, resp.status, "body: %s", resp.body)
			require.Equal(t, tt.code, resp.errorCode(t))
			require.False(t, b.refundFound(t, key), "nothing was saved for the key")
		})
	}
}

func TestRefundAfterCloseIsRefused(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	charge := b.charge(t, visa("pk_1"))
	before := b.provider.Ledger(true)
	require.NoError(t, b.provider.Close())

	resp := b.postRefund(t, "rk_late", refundBody(charge.ID, 100, "re_late"))
	require.Equal(t, http.StatusServiceUnavailable, resp.status, "body: %s", resp.body)
	require.Equal(t, "shutting_down", resp.errorCode(t))
	require.Equal(t, before, b.provider.Ledger(true), "nothing was applied")
}

func TestRefundLookup(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	charge := b.charge(t, visa("pk_1"))
	b.refund(t, "rk_1", charge.ID, 100)

	require.True(t, b.refundFound(t, "rk_1"))
	require.False(t, b.refundFound(t, "rk_never_sent"))
	require.False(t, b.refundFound(t, "pk_1"), "a charge's key has no refund")

	// A refund's key has no charge either.
	_, err := b.client.Lookup(t.Context(), "rk_1")
	require.ErrorIs(t, err, psp.ErrNotFound)

	// The fake protocol's lookups are not the Stripe protocol's reads.
	resp := b.do(t, http.MethodGet, "/v1/refunds/rf_1", nil, "")
	require.Equal(t, http.StatusNotFound, resp.status)
	require.Equal(t, "route_not_found", resp.errorCode(t))
}

// Two hundred refunds of one unit each, under different keys and all at
// once, against a charge of one hundred: the provider decides each under
// its lock, so exactly one hundred are applied and the rest refused, and
// the charge is never refunded beyond its amount — after a restart either.
func TestRefundConcurrentRefundsNeverExceedTheCharge(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	charge := b.charge(t, psp.ChargeRequest{Key: "pk_100", Amount: 100, Currency: "USD", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_100"})

	const refunds = 200
	answers := make(chan string, refunds)
	var wg sync.WaitGroup
	for i := range refunds {
		wg.Go(func() {
			key := fmt.Sprintf("rk_%03d", i)
			resp, err := b.tryRefund(t, b.http, key, refundBody(charge.ID, 1, "re_"+key))
			switch {
			case err != nil:
				answers <- err.Error()
			case resp.status == http.StatusOK:
				answers <- "applied"
			default:
				var body struct {
					Error struct{ Code string } `json:"error"`
				}
				_ = json.Unmarshal(resp.body, &body)
				answers <- fmt.Sprintf("%d %s", resp.status, body.Error.Code)
			}
		})
	}
	wg.Wait()
	close(answers)

	counts := make(map[string]int)
	for answer := range answers {
		counts[answer]++
	}
	require.Equal(t, map[string]int{"applied": 100, "409 refund_exceeds_charge": 100}, counts)

	ledger := b.ledger(t, false)
	require.Len(t, ledger, 1)
	require.Len(t, ledger[0].Refunds, 100)
	var refunded int64
	for _, refund := range ledger[0].Refunds {
		refunded += refund.Amount
	}
	require.Equal(t, int64(100), refunded)

	require.NoError(t, b.provider.Close())
	restarted := setup(t, fakepsp.Config{LedgerPath: b.ledgerPath})
	resp := restarted.postRefund(t, "rk_after_restart", refundBody(charge.ID, 1, "re_after_restart"))
	require.Equal(t, http.StatusConflict, resp.status, "what was refunded is read back: body %s", resp.body)
	require.Equal(t, "refund_exceeds_charge", resp.errorCode(t))
	require.Equal(t, ledger, restarted.ledger(t, false))
}

func TestRefundConcurrentDuplicatesMakeOneRefund(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	charge := b.charge(t, visa("pk_1"))
	const requests = 64

	ids := make(chan string, requests)
	var wg sync.WaitGroup
	for range requests {
		wg.Go(func() {
			resp, err := b.tryRefund(t, b.http, "rk_storm", refundBody(charge.ID, 10, "re_storm"))
			switch {
			case err != nil:
				ids <- err.Error()
			case resp.status != http.StatusOK:
				ids <- string(resp.body)
			default:
				var refund refundAnswer
				_ = json.Unmarshal(resp.body, &refund)
				ids <- refund.ID
			}
		})
	}
	wg.Wait()
	close(ids)

	seen := make(map[string]int)
	for id := range ids {
		seen[id]++
	}
	require.Len(t, seen, 1, "every request got the same refund: %v", seen)
	require.Len(t, b.refunds(t), 1)
}

// With de-duplication off every request executes, a refund too: a retry
// refunds again. The provider still refuses what would refund more than the
// charge, so a double refund shows as two refunds with one reference, never
// as a charge refunded beyond its amount.
func TestRefundDedupeOff(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{Dedupe: ptr(false)})
	charge := b.charge(t, visa("pk_1"))
	body := refundBody(charge.ID, 400, "re_twice")

	first := b.postRefund(t, "rk_twice", body)
	second := b.postRefund(t, "rk_twice", body)
	require.Equal(t, http.StatusOK, first.status, "body: %s", first.body)
	require.Equal(t, http.StatusOK, second.status, "body: %s", second.body)
	require.Empty(t, second.header.Get("Idempotent-Replayed"))
	require.NotEqual(t, string(first.body), string(second.body))

	third := b.postRefund(t, "rk_twice", body)
	require.Equal(t, http.StatusConflict, third.status, "800 of 1000 refunded: 400 more is too much; body %s", third.body)
	require.Equal(t, "refund_exceeds_charge", third.errorCode(t))

	refunds := b.refunds(t)
	require.Len(t, refunds, 2)
	require.Equal(t, refunds[0].Reference, refunds[1].Reference)
	var latest refundAnswer
	require.NoError(t, json.Unmarshal(second.body, &latest))
	lookup := b.refundLookup(t, "rk_twice")
	require.Equal(t, http.StatusOK, lookup.status, "body: %s", lookup.body)
	require.JSONEq(t, string(second.body), string(lookup.body), "a lookup shows the latest refund for the key")
}

func TestRestartKeepsRefundsAndKeys(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	first := setup(t, fakepsp.Config{
		LedgerPath: path,
		Faults:     faults(fakepsp.Rule{On: fakepsp.OnRefund, Fault: fakepsp.FaultErrorAfterApply, P: 1, KeyPrefix: "rk_err"}),
	})
	charge := first.charge(t, visa("pk_1"))
	refunded := first.postRefund(t, "rk_ok", refundBody(charge.ID, 300, "re_ok"))
	require.Equal(t, http.StatusOK, refunded.status, "body: %s", refunded.body)
	refused := first.postRefund(t, "rk_refused", refundBody(charge.ID, 5000, "re_refused"))
	require.Equal(t, http.StatusConflict, refused.status)
	failed := first.postRefund(t, "rk_err", refundBody(charge.ID, 200, "re_err"))
	require.Equal(t, http.StatusInternalServerError, failed.status)
	before := first.ledger(t, true)
	require.Len(t, before[0].Refunds, 2)
	require.NoError(t, first.provider.Close())

	second := setup(t, fakepsp.Config{LedgerPath: path})
	require.Equal(t, before, second.ledger(t, true))

	// Every key's answer is as it was: the refund replayed, the refusal
	// replayed, error_after_apply's 500 replayed while the lookup shows its
	// refund.
	again := second.postRefund(t, "rk_ok", refundBody(charge.ID, 300, "re_ok"))
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, string(refunded.body), string(again.body))
	again = second.postRefund(t, "rk_refused", refundBody(charge.ID, 5000, "re_refused"))
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, string(refused.body), string(again.body))
	again = second.postRefund(t, "rk_err", refundBody(charge.ID, 200, "re_err"))
	require.Equal(t, http.StatusInternalServerError, again.status)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.True(t, second.refundFound(t, "rk_err"))
	require.False(t, second.refundFound(t, "rk_refused"))

	// What is left of the charge is read back too: 500 of 1000.
	resp := second.postRefund(t, "rk_too_much", refundBody(charge.ID, 501, "re_too_much"))
	require.Equal(t, http.StatusConflict, resp.status)
	second.refund(t, "rk_rest", charge.ID, 500)
	require.Len(t, second.refunds(t), 3)
}

func TestLedgerRefundLinesAreChecked(t *testing.T) {
	t.Parallel()

	const charge = `{"id":"py_1","idempotency_key":"pk_1","reference":"ch_1","amount":1000,"currency":"USD","status":"succeeded","tenant_tag":"","created_at":"2026-01-02T03:04:05Z","request_hash":"h"}`
	tests := map[string]string{
		"a refund of a charge the file does not hold": `{"kind":"refund","id":"rf_1","idempotency_key":"rk_1","reference":"re_1","charge":"py_other","amount":100,"currency":"USD","status":"succeeded","tenant_tag":"","created_at":"2026-01-02T03:04:06Z","request_hash":"h"}`,
		"a refund before its charge":                  "",
		"a refund without an amount":                  `{"kind":"refund","id":"rf_1","idempotency_key":"rk_1","reference":"re_1","charge":"py_1","amount":0,"currency":"USD","status":"succeeded","tenant_tag":"","created_at":"2026-01-02T03:04:06Z","request_hash":"h"}`,
		"a refund that did not succeed":               `{"kind":"refund","id":"rf_1","idempotency_key":"rk_1","reference":"re_1","charge":"py_1","amount":100,"currency":"USD","status":"failed","tenant_tag":"","created_at":"2026-01-02T03:04:06Z","request_hash":"h"}`,
		"refunds nested in a charge":                  `{"id":"py_2","idempotency_key":"pk_2","reference":"ch_2","amount":1000,"currency":"USD","status":"succeeded","tenant_tag":"","created_at":"2026-01-02T03:04:05Z","request_hash":"h","refunds":[{"id":"rf_1"}]}`,
		"a saved answer without a status or a code":   `{"kind":"saved_error","id":"","idempotency_key":"rk_1","reference":"re_1","amount":0,"currency":"","status":"","tenant_tag":"","created_at":"2026-01-02T03:04:06Z","request_hash":"h"}`,
	}
	for name, line := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			lines := charge + "\n" + line + "\n"
			if line == "" {
				lines = `{"kind":"refund","id":"rf_1","idempotency_key":"rk_1","reference":"re_1","charge":"py_1","amount":100,"currency":"USD","status":"succeeded","tenant_tag":"","created_at":"2026-01-02T03:04:06Z","request_hash":"h"}` + "\n" + charge + "\n"
			}
			path := filepath.Join(t.TempDir(), "ledger.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(lines), 0o644))
			_, err := fakepsp.New(fakepsp.Config{LedgerPath: path})
			require.ErrorIs(t, err, fakepsp.ErrCorruptLedger)
		})
	}

	t.Run("a well-formed refund is read back", func(t *testing.T) {
		t.Parallel()

		path := filepath.Join(t.TempDir(), "ledger.jsonl")
		refund := `{"kind":"refund","id":"rf_1","idempotency_key":"rk_1","reference":"re_1","charge":"py_1","amount":100,"currency":"USD","status":"succeeded","tenant_tag":"","created_at":"2026-01-02T03:04:06Z","request_hash":"h"}`
		require.NoError(t, os.WriteFile(path, []byte(charge+"\n"+refund+"\n"), 0o644))
		b := setup(t, fakepsp.Config{LedgerPath: path})
		require.Equal(t, []string{"rf_1"}, refundIDs(b.refunds(t)))
	})
}

func TestAdminAuditCountsRefunds(t *testing.T) {
	t.Parallel()

	// With de-duplication off a retried refund is applied twice: the audit
	// shows it as one reference refunded twice.
	b := setup(t, fakepsp.Config{Dedupe: ptr(false)})
	usd := b.charge(t, psp.ChargeRequest{Key: "pk_a", Amount: 1000, Currency: "USD", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_a", Tag: "tenant-a"})
	eur := b.charge(t, psp.ChargeRequest{Key: "pk_b", Amount: 500, Currency: "EUR", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_b", Tag: "tenant-b"})
	refund := func(key, tag, body string) {
		resp := b.do(t, http.MethodPost, "/v1/refunds", http.Header{"Idempotency-Key": {key}, "X-Tenant-Tag": {tag}}, body)
		require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	}
	refund("rk_twice", "tenant-a", refundBody(usd.ID, 300, "re_twice"))
	refund("rk_twice", "tenant-a", refundBody(usd.ID, 300, "re_twice"))
	refund("rk_once", "tenant-a", refundBody(usd.ID, 100, "re_once"))
	refund("rk_eur", "tenant-b", refundBody(eur.ID, 500, "re_eur"))

	var audit fakepsp.Audit
	b.getJSON(t, "/_admin/audit", &audit)
	require.Equal(t, 2, audit.Charges)
	require.Equal(t, 4, audit.Refunds)
	require.Equal(t, map[string]int{"1": 2, "2": 1}, audit.RefundsPerReference)
	require.Len(t, audit.DuplicateRefunds, 1)
	require.Equal(t, "re_twice", audit.DuplicateRefunds[0].Reference)
	require.Len(t, audit.DuplicateRefunds[0].Refunds, 2)
	require.NotEqual(t, audit.DuplicateRefunds[0].Refunds[0].ID, audit.DuplicateRefunds[0].Refunds[1].ID)
	require.Empty(t, audit.OverRefunded, "the provider still refused what was not left")
	require.NotNil(t, audit.OverRefunded)
	require.Equal(t, []fakepsp.Total{
		{TenantTag: "tenant-a", Currency: "USD", Charges: 1, Amount: 1000, Refunds: 3, Refunded: 700},
		{TenantTag: "tenant-b", Currency: "EUR", Charges: 1, Amount: 500, Refunds: 1, Refunded: 500},
	}, audit.Totals)
}

// The provider never refunds a charge beyond its amount, so only a ledger
// it did not write can hold such a charge; the audit reports it all the
// same, and the provider refunds nothing more of it.
func TestAdminAuditReportsOverRefunds(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	lines := strings.Join([]string{
		`{"id":"py_1","idempotency_key":"pk_1","reference":"ch_1","amount":1000,"currency":"USD","status":"succeeded","tenant_tag":"","created_at":"2026-01-02T03:04:05Z","request_hash":"h"}`,
		`{"kind":"refund","id":"rf_1","idempotency_key":"rk_1","reference":"re_1","charge":"py_1","amount":600,"currency":"USD","status":"succeeded","tenant_tag":"","created_at":"2026-01-02T03:04:06Z","request_hash":"h"}`,
		`{"kind":"refund","id":"rf_2","idempotency_key":"rk_2","reference":"re_2","charge":"py_1","amount":600,"currency":"USD","status":"succeeded","tenant_tag":"","created_at":"2026-01-02T03:04:07Z","request_hash":"h"}`,
	}, "\n") + "\n"
	require.NoError(t, os.WriteFile(path, []byte(lines), 0o644))
	b := setup(t, fakepsp.Config{LedgerPath: path})

	var audit fakepsp.Audit
	b.getJSON(t, "/_admin/audit", &audit)
	require.Len(t, audit.OverRefunded, 1)
	require.Equal(t, "py_1", audit.OverRefunded[0].Charge.ID)
	require.Len(t, audit.OverRefunded[0].Charge.Refunds, 2)
	require.Equal(t, int64(1200), audit.OverRefunded[0].Refunded)
	require.Empty(t, audit.DuplicateRefunds)

	before := b.ledger(t, true)
	resp := b.postRefund(t, "rk_3", refundBody("py_1", 1, "re_3"))
	require.Equal(t, http.StatusConflict, resp.status, "body: %s", resp.body)
	require.Equal(t, "refund_exceeds_charge", resp.errorCode(t))
	require.Equal(t, before, b.ledger(t, true))

	// Nor does "what is left", Stripe's default amount, come out negative.
	require.NoError(t, b.provider.Close())
	stripeSide := setupStripe(t, fakepsp.Config{LedgerPath: path})
	_, err := stripeSide.createRefund(t, "cf_rest", refundOf("py_1", "re_rest", 0))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeChargeAlreadyRefunded)
	require.Equal(t, before, stripeSide.ledger(t, true))
}

// psp.Client, the adapter built to docs/refunds.md, reads the fake's
// refunds as the contract says: a refund, a refusal as a failed refund
// with the fake's code and no id, a lookup that finds the refund, and a
// not-found for a key without one. The two are built separately, so this
// is what keeps their spellings together.
func TestRefundThroughPSPClient(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	charge := b.charge(t, visa("pk_1"))
	req := psp.RefundRequest{Key: "rk_1", Charge: charge.ID, Amount: 600, Currency: "USD", Reference: "re_1", Reason: "duplicate", Tag: "tenant-a"}

	refund, err := b.client.Refund(t.Context(), req)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(refund.ID, "rf_"), refund.ID)
	require.Equal(t, psp.Refund{ID: refund.ID, Status: psp.StatusSucceeded, Charge: charge.ID, Amount: 600, Currency: "USD", Reference: "re_1"}, refund)

	found, err := b.client.FindRefund(t.Context(), psp.LookupRequest{Key: "rk_1", Charge: charge.ID, Reference: "re_1"})
	require.NoError(t, err)
	require.Equal(t, refund, found)
	_, err = b.client.FindRefund(t.Context(), psp.LookupRequest{Key: "rk_never_sent"})
	require.ErrorIs(t, err, psp.ErrNotFound)

	for code, refused := range map[string]psp.RefundRequest{
		psp.CodeRefundExceedsCharge: {Key: "rk_2", Charge: charge.ID, Amount: 401, Currency: "USD", Reference: "re_2"},
		psp.CodeChargeNotRefundable: {Key: "rk_3", Charge: "py_nothing", Amount: 1, Currency: "USD", Reference: "re_3"},
	} {
		failed, err := b.client.Refund(t.Context(), refused)
		require.NoError(t, err, code)
		require.Equal(t, refused.Refused(code), failed)
		// The replayed refusal reads the same.
		again, err := b.client.Refund(t.Context(), refused)
		require.NoError(t, err, code)
		require.Equal(t, failed, again)
		_, err = b.client.FindRefund(t.Context(), psp.LookupRequest{Key: refused.Key})
		require.ErrorIs(t, err, psp.ErrNotFound, "no refund exists for a refused key")
	}

	refunds := b.refunds(t)
	require.Len(t, refunds, 1)
	require.Equal(t, "tenant-a", refunds[0].TenantTag)
	require.Equal(t, "duplicate", refunds[0].Reason)
}
