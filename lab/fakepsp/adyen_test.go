package fakepsp_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp"
)

func TestAdyenPaymentAuthorised(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setupAdyen(t, fakepsp.Config{Now: clock.Now})
	answer := b.pay(t, "cf_ch_1", payment("ch_1", fakepsp.PaymentMethodVisa))
	require.Equal(t, paymentResponse{PSPReference: answer.PSPReference, ResultCode: "Authorised",
		Amount: amountObject{Currency: "EUR", Value: 1000}, MerchantReference: "ch_1"}, answer)

	// The ledger files it like any charge: our reference, the tenant from
	// the metadata, the key.
	require.Equal(t, []fakepsp.LedgerEntry{{
		ID: answer.PSPReference, IdempotencyKey: "cf_ch_1", Reference: "ch_1", Amount: 1000, Currency: "EUR",
		Status: psp.StatusSucceeded, TenantTag: "tn_tenant", CreatedAt: clock.Now(),
	}}, b.ledger(t, false))

	// Without the metadata, the shopperReference is the tenant.
	mastercard := b.pay(t, "cf_ch_2", with(payment("ch_2", fakepsp.PaymentMethodMastercard), "metadata", nil))
	require.Equal(t, "Authorised", mastercard.ResultCode)
	require.NotEqual(t, answer.PSPReference, mastercard.PSPReference)
	require.Equal(t, "tn_shopper", b.ledger(t, false)[1].TenantTag)
}

func TestAdyenPaymentRefusals(t *testing.T) {
	t.Parallel()

	b := setupAdyen(t, fakepsp.Config{})
	tests := []struct {
		method, code, reason string
	}{
		{fakepsp.PaymentMethodDeclined, "2", "Refused"},
		{fakepsp.PaymentMethodInsufficientFunds, "12", "Not enough balance"},
		{fakepsp.PaymentMethodExpiredCard, "6", "Expired Card"},
		{fakepsp.PaymentMethodIncorrectCVC, "24", "CVC Declined"},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			t.Parallel()

			key := "cf_" + tt.method
			answer := b.pay(t, key, payment("ch_"+tt.method, tt.method))
			require.Equal(t, paymentResponse{PSPReference: answer.PSPReference, ResultCode: "Refused",
				Amount: amountObject{Currency: "EUR", Value: 1000}, MerchantReference: "ch_" + tt.method,
				RefusalReason: tt.reason, RefusalReasonCode: tt.code}, answer, "a refusal is a 200, a value")

			// A re-send answers the refusal again.
			require.Equal(t, answer, b.pay(t, key, payment("ch_"+tt.method, tt.method)))
		})
	}
	t.Cleanup(func() {
		ledger := b.provider.Ledger(true)
		require.Len(t, ledger, len(tests), "recorded as declined charges")
		for _, entry := range ledger {
			require.Equal(t, psp.StatusFailed, entry.Status)
		}
		require.Empty(t, b.provider.Ledger(false), "no money moved")
	})
}

// Requests refused before execution save nothing: the same key then
// executes a valid request.
func TestAdyenValidationSavesNothing(t *testing.T) {
	t.Parallel()

	valid := payment("ch_v", fakepsp.PaymentMethodVisa)
	invalid := http.Header{expectHeader: {expectInvalid}}
	tests := []struct {
		name       string
		key        string
		body       any
		header     http.Header // marks a request Adyen's description refuses
		status     int
		code       string
		errorMatch string
	}{
		{"not JSON", "", `{"amount":`, invalid, http.StatusBadRequest, "702", "Unexpected input"},
		{"data after the object", "", `{"reference":"ch_v"} {}`, invalid, http.StatusBadRequest, "702", "Unexpected input"},
		{"no amount", "", with(valid, "amount", nil), invalid, http.StatusUnprocessableEntity, "100", "'amount'"},
		{"no value", "", with(valid, "amount", map[string]any{"currency": "EUR"}), invalid, http.StatusUnprocessableEntity, "137", ""},
		{"zero value", "", with(valid, "amount", map[string]any{"currency": "EUR", "value": 0}), nil, http.StatusUnprocessableEntity, "137", ""},
		{"negative value", "", with(valid, "amount", map[string]any{"currency": "EUR", "value": -5}), nil, http.StatusUnprocessableEntity, "137", ""},
		{"value a string", "", with(valid, "amount", map[string]any{"currency": "EUR", "value": "1000"}), invalid, http.StatusUnprocessableEntity, "702", "amount.value"},
		{"lower-case currency", "", with(valid, "amount", map[string]any{"currency": "eur", "value": 1000}), nil, http.StatusUnprocessableEntity, "137", ""},
		{"no merchant account", "", with(valid, "merchantAccount", nil), invalid, http.StatusUnprocessableEntity, "702", "'merchantAccount'"},
		{"no reference", "", with(valid, "reference", nil), invalid, http.StatusUnprocessableEntity, "702", "'reference'"},
		{"reference too long", "", with(valid, "reference", strings.Repeat("r", 81)), nil, http.StatusUnprocessableEntity, "702", "80"},
		{"no payment method", "", with(valid, "paymentMethod", nil), invalid, http.StatusUnprocessableEntity, "702", "'paymentMethod'"},
		{"raw card details", "", with(valid, "paymentMethod", map[string]any{"type": "scheme", "encryptedCardNumber": "adyenjs_…"}), nil, http.StatusUnprocessableEntity, "702", ""},
		{"another type", "", with(valid, "paymentMethod", map[string]any{"type": "ideal"}), nil, http.StatusUnprocessableEntity, "702", "stored cards"},
		{"unknown stored payment method", "", with(valid, "paymentMethod", map[string]any{"type": "scheme", "storedPaymentMethodId": "pm_card_unknown"}), nil, http.StatusUnprocessableEntity, "803", "PaymentDetail not found"},
		{"no return URL", "", with(valid, "returnUrl", nil), invalid, http.StatusUnprocessableEntity, "14_030", "Return URL is missing"},
		{"short shopper reference", "", with(valid, "shopperReference", "tn"), invalid, http.StatusUnprocessableEntity, "702", "shopperReference"},
		{"unknown shopper interaction", "", with(valid, "shopperInteraction", "Phone"), invalid, http.StatusUnprocessableEntity, "702", "shopperInteraction"},
		{"unknown recurring model", "", with(valid, "recurringProcessingModel", "Sometimes"), invalid, http.StatusUnprocessableEntity, "702", "recurringProcessingModel"},
		{"a field Adyen does not have", "", with(valid, "bogus", 1), invalid, http.StatusUnprocessableEntity, "702", "bogus"},
		{"a field the fake does not model", "", with(valid, "shopperEmail", "s@example.com"), nil, http.StatusUnprocessableEntity, "702", "shopperEmail"},
		{"metadata too large", "", with(valid, "metadata", map[string]any{"a_key_longer_than_twenty": "v"}), nil, http.StatusUnprocessableEntity, "177", "Metadata size exceeds limit"},
		{"metadata not strings", "", with(valid, "metadata", map[string]any{"n": 1}), invalid, http.StatusUnprocessableEntity, "702", ""},
		{"no key", "-", valid, nil, http.StatusUnprocessableEntity, "702", "Idempotency-Key"},
		{"a key longer than 64", strings.Repeat("k", 65), valid, nil, http.StatusUnprocessableEntity, "702", "64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupAdyen(t, fakepsp.Config{})
			key := "cf_v"
			switch tt.key {
			case "-":
				key = ""
			case "":
			default:
				key = tt.key
			}
			resp := b.post(t, "/v71/payments", key, tt.body, tt.header)
			e := requireServiceError(t, resp, tt.status, tt.code, "validation")
			require.Contains(t, e.Message, tt.errorMatch)
			require.Empty(t, b.ledger(t, true), "refused before execution")

			// Nothing was saved for the key: it executes now.
			require.Equal(t, "Authorised", b.pay(t, "cf_v", valid).ResultCode)
			require.Len(t, b.ledger(t, true), 1)
		})
	}
}

func TestAdyenAuthentication(t *testing.T) {
	t.Parallel()

	b := setupAdyen(t, fakepsp.Config{})
	for path, body := range map[string]map[string]any{
		"/v71/payments":                payment("ch_auth", fakepsp.PaymentMethodVisa),
		refundPath("PSPREF0000000001"): refundRequest("re_auth", 100),
	} {
		resp := b.post(t, path, "cf_auth", body, http.Header{"X-Api-Key": {""}})
		e := requireServiceError(t, resp, http.StatusUnauthorized, "000", "security")
		require.Equal(t, "HTTP Status Response - Unauthorized", e.Message)
	}
	require.Empty(t, b.ledger(t, true))
	b.authorise(t, "cf_auth")
}

func TestAdyenRoutes(t *testing.T) {
	t.Parallel()

	b := setupAdyen(t, fakepsp.Config{})
	off := http.Header{expectHeader: {expectOffDescription}}
	for _, path := range []string{"/v71/payments/details/more", "/v71/charges", "/v71/payments/PSP/refunds/again"} {
		resp := b.post(t, path, "cf_route", payment("ch_route", fakepsp.PaymentMethodVisa), off)
		requireServiceError(t, resp, http.StatusNotFound, "000", "validation")
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.url+"/v71/payments", nil)
	require.NoError(t, err)
	req.Header.Set("X-API-Key", adyenAPIKey)
	req.Header.Set(expectHeader, expectOffDescription)
	resp, err := b.client(0).Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "Adyen has no lookup")

	// The admin endpoints are the same under every protocol.
	require.Empty(t, b.ledger(t, true))
	b.authorise(t, "cf_route")
	entries, err := fakepsp.FetchLedger(t.Context(), b.url, false)
	require.NoError(t, err)
	require.Equal(t, "ch_cf_route", entries[0].Reference)
}

// A key is answered with its first result whatever the body, also after a
// restart, and refused on the other endpoint.
func TestAdyenKnownKeyIsReplayed(t *testing.T) {
	t.Parallel()

	b := setupAdyen(t, fakepsp.Config{})
	first := b.post(t, "/v71/payments", "cf_replay", payment("ch_replay", fakepsp.PaymentMethodVisa), nil)
	require.Equal(t, http.StatusOK, first.status)
	require.Empty(t, first.header.Get("Idempotent-Replayed"), "Adyen marks no replay")

	changed := with(payment("ch_other", fakepsp.PaymentMethodDeclined), "amount", map[string]any{"currency": "EUR", "value": 5})
	again := b.post(t, "/v71/payments", "cf_replay", changed, nil)
	require.Equal(t, http.StatusOK, again.status)
	require.Equal(t, string(first.body), string(again.body), "the first result, the body not compared")
	require.Equal(t, "cf_replay", again.header.Get("Idempotency-Key"))
	require.Empty(t, again.header.Get("Idempotent-Replayed"))
	require.Equal(t, []string{"ch_replay"}, b.ledgerReferences(t))

	// The payment's key on the refunds endpoint was already processed.
	var answer paymentResponse
	require.NoError(t, json.Unmarshal(first.body, &answer))
	resp := b.post(t, refundPath(answer.PSPReference), "cf_replay", refundRequest("re_replay", 100), nil)
	e := requireServiceError(t, resp, http.StatusUnprocessableEntity, "704", "validation")
	require.Equal(t, "request already processed or in progress", e.Message)
	require.Empty(t, b.refunds(t))

	// After a restart the ledger answers.
	require.NoError(t, b.provider.Close())
	restarted := setupAdyen(t, fakepsp.Config{LedgerPath: b.ledgerPath})
	after := restarted.post(t, "/v71/payments", "cf_replay", changed, nil)
	require.Equal(t, string(first.body), string(after.body))
	require.Equal(t, []string{"ch_replay"}, restarted.ledgerReferences(t))
}

func TestAdyenKeyInFlightIsRefused(t *testing.T) {
	t.Parallel()

	t.Run("while its request executes", func(t *testing.T) {
		t.Parallel()

		b := setupAdyen(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultLatency, 3000))})
		succeeded, refused := sendWhileExecuting(t, b.testBundle, func() (response, error) {
			resp := b.post(t, "/v71/payments", "cf_busy", payment("ch_busy", fakepsp.PaymentMethodVisa), nil)
			if resp.status != http.StatusOK {
				return resp, &inFlight{resp}
			}
			return resp, nil
		})
		var busy *inFlight
		require.ErrorAs(t, refused, &busy)
		e := requireServiceError(t, busy.response, http.StatusUnprocessableEntity, "704", "validation")
		require.Equal(t, "request already processed or in progress", e.Message)

		// The refusal saved nothing: a re-send now gets the first result.
		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		again := b.post(t, "/v71/payments", "cf_busy", payment("ch_busy", fakepsp.PaymentMethodVisa), nil)
		require.Equal(t, string(succeeded.body), string(again.body))
		require.Len(t, b.ledger(t, true), 1)
	})

	t.Run("until a delayed apply lands", func(t *testing.T) {
		t.Parallel()

		// 3 s: long enough that the re-send below arrives before it
		// lands, however slow the machine.
		b := setupAdyen(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultDelayedApply, 3000))})
		_, err := b.send(t, b.client(50*time.Millisecond), "/v71/payments", "cf_late", payment("ch_late", fakepsp.PaymentMethodVisa), nil)
		require.Error(t, err, "no answer at all")

		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		resp := b.post(t, "/v71/payments", "cf_late", payment("ch_late", fakepsp.PaymentMethodVisa), nil)
		requireServiceError(t, resp, http.StatusUnprocessableEntity, "704", "validation")
		require.Empty(t, b.ledger(t, true), "not applied yet")

		eventually(t, func() bool { return len(b.provider.Ledger(false)) == 1 }, "the delayed payment lands")
		answer := b.authorise(t, "cf_late")
		require.Equal(t, b.provider.Ledger(false)[0].ID, answer.PSPReference, "then the re-send gets its result")
	})
}

// inFlight is the error sendWhileExecuting reports for an answer that is
// not the payment.
type inFlight struct{ response }

func (e *inFlight) Error() string { return string(e.body) }

// The faults act on a payment in Adyen's shapes; a re-send with the key
// learns what a lost answer said.
func TestAdyenPaymentFaults(t *testing.T) {
	t.Parallel()

	// resend re-sends the payment of key with the faults off and returns
	// its answer.
	resend := func(t *testing.T, b *adyenBundle, key string) response {
		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		return b.post(t, "/v71/payments", key, payment("ch_"+key, fakepsp.PaymentMethodVisa), nil)
	}

	t.Run("latency", func(t *testing.T) {
		t.Parallel()

		b := setupAdyen(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultLatency, 200))})
		start := time.Now()
		b.authorise(t, "cf_slow")
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	})

	for _, fault := range []string{fakepsp.FaultApplyThenTimeout, fakepsp.FaultApplyThenReset} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()

			b := setupAdyen(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fault, 200))})
			_, err := b.send(t, b.client(100*time.Millisecond), "/v71/payments", "cf_lost", payment("ch_cf_lost", fakepsp.PaymentMethodVisa), nil)
			require.Error(t, err, "no answer at all")
			eventually(t, func() bool { return len(b.provider.Ledger(false)) == 1 }, "applied all the same")

			// The re-send with the same key answers the first result.
			resp := resend(t, b, "cf_lost")
			require.Equal(t, http.StatusOK, resp.status)
			var answer paymentResponse
			require.NoError(t, json.Unmarshal(resp.body, &answer))
			require.Equal(t, b.provider.Ledger(false)[0].ID, answer.PSPReference)
			require.Equal(t, "Authorised", answer.ResultCode)
			require.Len(t, b.ledger(t, true), 1)
		})
	}

	t.Run("drop_before_apply", func(t *testing.T) {
		t.Parallel()

		b := setupAdyen(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultDropBeforeApply, 0))})
		_, err := b.send(t, b.client(0), "/v71/payments", "cf_drop", payment("ch_cf_drop", fakepsp.PaymentMethodVisa), nil)
		require.Error(t, err)
		require.Empty(t, b.ledger(t, true))
		require.Equal(t, http.StatusOK, resend(t, b, "cf_drop").status, "nothing saved: the re-send executes")
		require.Len(t, b.ledger(t, true), 1)
	})

	t.Run("error_before_apply", func(t *testing.T) {
		t.Parallel()

		b := setupAdyen(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultErrorBeforeApply, 0))})
		resp := b.post(t, "/v71/payments", "cf_err", payment("ch_cf_err", fakepsp.PaymentMethodVisa), nil)
		requireServiceError(t, resp, http.StatusInternalServerError, "000", "internal")
		require.Empty(t, b.ledger(t, true))
		require.Equal(t, http.StatusOK, resend(t, b, "cf_err").status, "nothing saved: the re-send executes")
		require.Len(t, b.ledger(t, true), 1)
	})

	t.Run("error_after_apply", func(t *testing.T) {
		t.Parallel()

		b := setupAdyen(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultErrorAfterApply, 0))})
		first := b.post(t, "/v71/payments", "cf_500", payment("ch_cf_500", fakepsp.PaymentMethodVisa), nil)
		requireServiceError(t, first, http.StatusInternalServerError, "000", "internal")
		require.Len(t, b.ledger(t, false), 1, "money moved")

		// The first result was the 500: a re-send gets it, also after a
		// restart, the same body whether money moved or not.
		again := resend(t, b, "cf_500")
		require.Equal(t, string(first.body), string(again.body))
		require.NoError(t, b.provider.Close())
		restarted := setupAdyen(t, fakepsp.Config{LedgerPath: b.ledgerPath})
		after := restarted.post(t, "/v71/payments", "cf_500", payment("ch_cf_500", fakepsp.PaymentMethodVisa), nil)
		require.Equal(t, string(first.body), string(after.body))
		require.Len(t, restarted.ledger(t, false), 1)
	})

	t.Run("not_processed", func(t *testing.T) {
		t.Parallel()

		b := setupAdyen(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultNotProcessed, 0))})
		resp := b.post(t, "/v71/payments", "cf_429", payment("ch_cf_429", fakepsp.PaymentMethodVisa), nil)
		requireServiceError(t, resp, http.StatusTooManyRequests, "000", "internal")
		require.Equal(t, "1", resp.header.Get("Retry-After"))
		require.Empty(t, b.ledger(t, true))
		require.Equal(t, http.StatusOK, resend(t, b, "cf_429").status, "nothing saved: the re-send executes")
	})

	t.Run("key_expiry", func(t *testing.T) {
		t.Parallel()

		clock := newTestClock()
		b := setupAdyen(t, fakepsp.Config{Now: clock.Now, Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultKeyExpiry, 1000))})
		first := b.authorise(t, "cf_expiring")
		clock.Advance(999 * time.Millisecond)
		require.Equal(t, first, b.authorise(t, "cf_expiring"), "within the window the key answers its first result")
		clock.Advance(time.Millisecond)
		second := b.authorise(t, "cf_expiring")
		require.NotEqual(t, first.PSPReference, second.PSPReference, "the forgotten key charged again")
		require.Len(t, b.ledger(t, false), 2)
	})

	t.Run("no lookup to act on", func(t *testing.T) {
		t.Parallel()

		b := setupAdyen(t, fakepsp.Config{Faults: faults(always(fakepsp.OnLookup, fakepsp.FaultUnavailable, 0),
			always(fakepsp.OnLookup, fakepsp.FaultLookupLag, 60_000))})
		answer := b.authorise(t, "cf_lookup")
		b.refundPayment(t, "rf_lookup", answer.PSPReference, 100)
		require.Empty(t, b.faultsFired(t), "Adyen has no lookup: the lookup rules never draw")
	})
}

func TestAdyenDedupeOff(t *testing.T) {
	t.Parallel()

	b := setupAdyen(t, fakepsp.Config{Dedupe: ptr(false)})
	first := b.authorise(t, "cf_twice")
	second := b.authorise(t, "cf_twice")
	require.NotEqual(t, first.PSPReference, second.PSPReference, "every POST applies anew")
	var audit fakepsp.Audit
	b.getJSON(t, "/_admin/audit", &audit)
	require.Len(t, audit.Duplicates, 1)
}

// Logs name keys, references and faults, never a payment method, an API
// key or metadata.
func TestAdyenLogsNeverContainPaymentMethodsKeysOrMetadata(t *testing.T) {
	t.Parallel()

	logger, logs := debugLogger()
	b := setupAdyen(t, fakepsp.Config{Logger: logger, Faults: faults(fakepsp.Rule{On: fakepsp.OnCharge, Fault: fakepsp.FaultLatency, P: 1, MS: 1, KeyPrefix: "cf_slow"})})
	answer := b.authorise(t, "cf_logged")
	b.pay(t, "cf_slow", payment("ch_slow", fakepsp.PaymentMethodInsufficientFunds))
	b.refundPayment(t, "rf_logged", answer.PSPReference, 100)
	b.post(t, "/v71/payments", "cf_bad", with(payment("ch_bad", "pm_card_secret"), "returnUrl", nil), http.Header{expectHeader: {expectInvalid}})

	text := logs.String()
	require.Contains(t, text, "cf_logged")
	for _, secret := range []string{"pm_card", adyenAPIKey, "tn_tenant", "tn_shopper", "chargeflow.example"} {
		require.NotContains(t, text, secret)
	}
}

func TestNewRefusesAnAdyenSecretThatIsNotHex(t *testing.T) {
	t.Parallel()

	_, err := fakepsp.New(fakepsp.Config{LedgerPath: filepath.Join(t.TempDir(), "ledger.jsonl"), Protocol: fakepsp.ProtocolAdyen,
		Notifications: fakepsp.Notifications{URL: "http://127.0.0.1:1/hook", Secret: "whsec_not_hex"}})
	require.ErrorIs(t, err, fakepsp.ErrNotificationConfig)
	require.ErrorContains(t, err, "hex")
	require.NotContains(t, err.Error(), "whsec_not_hex")
}
