package fakepsp_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp"
)

func TestNewRequiresALedgerPath(t *testing.T) {
	t.Parallel()

	_, err := fakepsp.New(fakepsp.Config{})
	require.ErrorIs(t, err, fakepsp.ErrLedgerPathRequired)
}

func TestNewRefusesAnInvalidSchedule(t *testing.T) {
	t.Parallel()

	_, err := fakepsp.New(fakepsp.Config{
		LedgerPath: filepath.Join(t.TempDir(), "ledger.jsonl"),
		Faults:     faults(fakepsp.Rule{On: fakepsp.OnLookup, Fault: fakepsp.FaultApplyThenReset, P: 1}),
	})
	require.ErrorIs(t, err, fakepsp.ErrInvalidSchedule)
}

func TestChargeOutcomeByPaymentMethod(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	tests := []struct {
		paymentMethod string
		status        psp.Status
		declineCode   string
	}{
		{fakepsp.PaymentMethodVisa, psp.StatusSucceeded, ""},
		{fakepsp.PaymentMethodMastercard, psp.StatusSucceeded, ""},
		{fakepsp.PaymentMethodDeclined, psp.StatusFailed, "generic_decline"},
		{fakepsp.PaymentMethodInsufficientFunds, psp.StatusFailed, "insufficient_funds"},
		{fakepsp.PaymentMethodExpiredCard, psp.StatusFailed, "expired_card"},
		{fakepsp.PaymentMethodIncorrectCVC, psp.StatusFailed, "incorrect_cvc"},
		{"pm_card_unknown", psp.StatusFailed, "invalid_payment_method"},
	}
	for _, tt := range tests {
		t.Run(tt.paymentMethod, func(t *testing.T) {
			t.Parallel()

			req := psp.ChargeRequest{Key: "pk_" + tt.paymentMethod, Amount: 4200, Currency: "EUR", PaymentMethod: tt.paymentMethod, Reference: "ch_" + tt.paymentMethod}
			charge := b.charge(t, req)
			require.True(t, strings.HasPrefix(charge.ID, "py_"), charge.ID)
			require.Equal(t, tt.status, charge.Status)
			require.Equal(t, tt.declineCode, charge.DeclineCode)
			require.Equal(t, int64(4200), charge.Amount)
			require.Equal(t, "EUR", charge.Currency)
			require.Equal(t, req.Reference, charge.Reference)

			found, err := b.client.Lookup(t.Context(), req.Key)
			require.NoError(t, err)
			require.Equal(t, charge, found)
		})
	}
}

func TestChargeValidation(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	const valid = `{"amount":1000,"currency":"USD","payment_method":"pm_card_visa","reference":"ch_1"}`
	tests := []struct {
		name   string
		header http.Header
		body   string
		status int
		code   string
	}{
		{"missing key", http.Header{}, valid, 400, "idempotency_key_missing"},
		{"empty key", http.Header{"Idempotency-Key": {""}}, valid, 400, "idempotency_key_missing"},
		{"repeated key", http.Header{"Idempotency-Key": {"a", "b"}}, valid, 400, "idempotency_key_invalid"},
		{"key too long", http.Header{"Idempotency-Key": {strings.Repeat("k", 256)}}, valid, 400, "idempotency_key_invalid"},
		{"not json", nil, `amount=1000`, 400, "invalid_json"},
		{"unknown field", nil, `{"amount":1000,"currency":"USD","payment_method":"pm_card_visa","reference":"ch_1","card":"4242"}`, 400, "invalid_json"},
		{"trailing data", nil, valid + `{}`, 400, "invalid_json"},
		{"amount zero", nil, `{"amount":0,"currency":"USD","payment_method":"pm_card_visa","reference":"ch_1"}`, 400, "parameter_invalid"},
		{"amount negative", nil, `{"amount":-5,"currency":"USD","payment_method":"pm_card_visa","reference":"ch_1"}`, 400, "parameter_invalid"},
		{"amount fraction", nil, `{"amount":10.5,"currency":"USD","payment_method":"pm_card_visa","reference":"ch_1"}`, 400, "parameter_invalid"},
		{"amount exponent", nil, `{"amount":1e3,"currency":"USD","payment_method":"pm_card_visa","reference":"ch_1"}`, 400, "parameter_invalid"},
		{"amount string", nil, `{"amount":"1000","currency":"USD","payment_method":"pm_card_visa","reference":"ch_1"}`, 400, "parameter_invalid"},
		{"amount missing", nil, `{"currency":"USD","payment_method":"pm_card_visa","reference":"ch_1"}`, 400, "parameter_invalid"},
		{"amount overflow", nil, `{"amount":99999999999999999999,"currency":"USD","payment_method":"pm_card_visa","reference":"ch_1"}`, 400, "parameter_invalid"},
		{"currency lower case", nil, `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa","reference":"ch_1"}`, 400, "parameter_invalid"},
		{"currency too short", nil, `{"amount":1000,"currency":"US","payment_method":"pm_card_visa","reference":"ch_1"}`, 400, "parameter_invalid"},
		{"payment method missing", nil, `{"amount":1000,"currency":"USD","reference":"ch_1"}`, 400, "parameter_invalid"},
		{"reference missing", nil, `{"amount":1000,"currency":"USD","payment_method":"pm_card_visa"}`, 400, "parameter_invalid"},
		{"body too large", nil, `{"reference":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "request_too_large"},
	}
	// Parent cleanups run once every parallel subtest has finished.
	t.Cleanup(func() {
		require.Empty(t, b.provider.Ledger(true), "nothing was applied")
	})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			header := tt.header
			if header == nil {
				header = http.Header{"Idempotency-Key": {fmt.Sprintf("pk_invalid_%d", i)}}
			}
			resp := b.do(t, http.MethodPost, "/v1/charges", header, tt.body)
			require.Equal(t, tt.status, resp.status, "body: %s", resp.body)
			require.Equal(t, tt.code, resp.errorCode(t))
			require.Equal(t, "application/json", resp.header.Get("Content-Type"))
		})
	}
}

func TestChargeReplaysAKnownKey(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	const body = `{"amount":1000,"currency":"USD","payment_method":"pm_card_visa","reference":"ch_1"}`

	first := b.postCharge(t, "pk_replay", body)
	require.Equal(t, http.StatusOK, first.status)
	require.Empty(t, first.header.Get("Idempotent-Replayed"))

	second := b.postCharge(t, "pk_replay", body)
	require.Equal(t, http.StatusOK, second.status)
	require.Equal(t, "true", second.header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(first.body), string(second.body))

	require.Len(t, b.ledger(t, true), 1)
}

func TestChargeKeyReusedWithDifferentParameters(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	b.charge(t, visa("pk_reused"))

	changed := visa("pk_reused")
	changed.Amount = 2000
	_, err := b.client.Charge(t.Context(), changed)
	pspErr := requirePSPError(t, err, psp.ErrUnknownOutcome, "status_409")
	require.Equal(t, "idempotency_key_reused", pspErr.ProviderCode)

	require.Len(t, b.ledger(t, true), 1)
}

func TestChargeConcurrentDuplicatesMakeOneCharge(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	const requests = 64

	ids := make(chan string, requests)
	var wg sync.WaitGroup
	for range requests {
		wg.Go(func() {
			charge, err := b.client.Charge(t.Context(), visa("pk_storm"))
			if err == nil {
				ids <- charge.ID
			} else {
				ids <- err.Error()
			}
		})
	}
	wg.Wait()
	close(ids)

	seen := make(map[string]int)
	for id := range ids {
		seen[id]++
	}
	require.Len(t, seen, 1, "every request got the same charge: %v", seen)
	require.Len(t, b.ledger(t, true), 1)
}

func TestLookup(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	succeeded := b.charge(t, visa("pk_lookup/ok"))
	declined := b.charge(t, psp.ChargeRequest{Key: "pk_lookup declined", Amount: 500, Currency: "GBP", PaymentMethod: fakepsp.PaymentMethodDeclined, Reference: "ch_2"})
	require.Equal(t, psp.StatusFailed, declined.Status)

	found, err := b.client.Lookup(t.Context(), "pk_lookup/ok")
	require.NoError(t, err)
	require.Equal(t, succeeded, found)

	found, err = b.client.Lookup(t.Context(), "pk_lookup declined")
	require.NoError(t, err)
	require.Equal(t, declined, found)

	_, err = b.client.Lookup(t.Context(), "pk_never_sent")
	require.ErrorIs(t, err, psp.ErrNotFound)

	resp := b.do(t, http.MethodGet, "/v1/charges/by-key/pk_never_sent", nil, "")
	require.Equal(t, http.StatusNotFound, resp.status)
	require.Equal(t, psp.CodeChargeNotFound, resp.errorCode(t))

	// A route the provider does not have is a 404 too, but not the proof.
	resp = b.do(t, http.MethodGet, "/v1/nowhere", nil, "")
	require.Equal(t, http.StatusNotFound, resp.status)
	require.Equal(t, "route_not_found", resp.errorCode(t))
}

func TestAdminLedger(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setup(t, fakepsp.Config{Now: clock.Now})
	first := b.charge(t, visa("pk_1"))
	declined := b.charge(t, psp.ChargeRequest{Key: "pk_2", Amount: 700, Currency: "USD", PaymentMethod: fakepsp.PaymentMethodInsufficientFunds, Reference: "ch_pk_2", Tag: "tenant-b"})
	clock.Advance(1)
	third := b.charge(t, psp.ChargeRequest{Key: "pk_3", Amount: 300, Currency: "JPY", PaymentMethod: fakepsp.PaymentMethodMastercard, Reference: "ch_pk_3", Tag: "tenant-a"})

	moved := b.ledger(t, false)
	require.Equal(t, []fakepsp.LedgerEntry{
		{ID: first.ID, IdempotencyKey: "pk_1", Reference: "ch_pk_1", Amount: 1000, Currency: "USD", Status: psp.StatusSucceeded, CreatedAt: clock.Now().Add(-1)},
		{ID: third.ID, IdempotencyKey: "pk_3", Reference: "ch_pk_3", Amount: 300, Currency: "JPY", Status: psp.StatusSucceeded, TenantTag: "tenant-a", CreatedAt: clock.Now()},
	}, moved)

	all := b.ledger(t, true)
	require.Len(t, all, 3)
	require.Equal(t, declined.ID, all[1].ID)
	require.Equal(t, "insufficient_funds", all[1].DeclineCode)
	require.Equal(t, "tenant-b", all[1].TenantTag)

	resp := b.do(t, http.MethodGet, "/_admin/ledger?all=maybe", nil, "")
	require.Equal(t, http.StatusBadRequest, resp.status)
}

func TestAdminAudit(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{Dedupe: ptr(false)})
	charge := func(key, tag, currency string, amount int64, paymentMethod string) {
		b.charge(t, psp.ChargeRequest{Key: key, Amount: amount, Currency: currency, PaymentMethod: paymentMethod, Reference: "ch_" + key, Tag: tag})
	}
	charge("pk_a", "tenant-a", "USD", 1000, fakepsp.PaymentMethodVisa)
	charge("pk_a", "tenant-a", "USD", 1000, fakepsp.PaymentMethodVisa) // dedupe is off: a double charge
	charge("pk_b", "tenant-a", "EUR", 250, fakepsp.PaymentMethodVisa)
	charge("pk_c", "", "USD", 99, fakepsp.PaymentMethodVisa)
	charge("pk_d", "tenant-b", "USD", 5000, fakepsp.PaymentMethodDeclined)
	charge("pk_d", "tenant-b", "USD", 5000, fakepsp.PaymentMethodDeclined) // two declines move nothing

	var audit fakepsp.Audit
	b.getJSON(t, "/_admin/audit", &audit)
	require.Equal(t, 4, audit.Charges)
	require.Equal(t, 2, audit.Declines)
	require.Equal(t, 3, audit.Keys)
	require.Equal(t, map[string]int{"1": 2, "2": 1}, audit.ChargesPerKey)
	require.Len(t, audit.Duplicates, 1)
	require.Equal(t, "pk_a", audit.Duplicates[0].IdempotencyKey)
	require.Len(t, audit.Duplicates[0].Charges, 2)
	require.NotEqual(t, audit.Duplicates[0].Charges[0].ID, audit.Duplicates[0].Charges[1].ID)
	require.Equal(t, []fakepsp.Total{
		{TenantTag: "", Currency: "USD", Charges: 1, Amount: 99},
		{TenantTag: "tenant-a", Currency: "EUR", Charges: 1, Amount: 250},
		{TenantTag: "tenant-a", Currency: "USD", Charges: 2, Amount: 2000},
	}, audit.Totals)
}

func TestRestartKeepsChargesAndKeys(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	first := setup(t, fakepsp.Config{
		LedgerPath: path,
		Faults:     faults(fakepsp.Rule{On: fakepsp.OnCharge, Fault: fakepsp.FaultErrorAfterApply, P: 1, KeyPrefix: "pk_err"}),
	})
	succeeded := first.charge(t, visa("pk_ok"))
	declined := first.charge(t, psp.ChargeRequest{Key: "pk_declined", Amount: 100, Currency: "USD", PaymentMethod: fakepsp.PaymentMethodExpiredCard, Reference: "ch_d"})
	_, err := first.client.Charge(t.Context(), visa("pk_err"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "status_500")
	before := first.ledger(t, true)
	require.Len(t, before, 3)
	require.NoError(t, first.provider.Close())

	// A new provider on the same file, without faults.
	second := setup(t, fakepsp.Config{LedgerPath: path})
	require.Equal(t, before, second.ledger(t, true))

	found, err := second.client.Lookup(t.Context(), "pk_ok")
	require.NoError(t, err)
	require.Equal(t, succeeded, found)
	found, err = second.client.Lookup(t.Context(), "pk_declined")
	require.NoError(t, err)
	require.Equal(t, declined, found)

	// The keys are remembered: a replay answers the original charge, a
	// different request under the key is refused, and the recorded 500 is
	// still replayed.
	require.Equal(t, succeeded, second.charge(t, visa("pk_ok")))
	changed := visa("pk_ok")
	changed.Currency = "EUR"
	_, err = second.client.Charge(t.Context(), changed)
	requirePSPError(t, err, psp.ErrUnknownOutcome, "status_409")
	_, err = second.client.Charge(t.Context(), visa("pk_err"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "status_500")

	require.Equal(t, before, second.ledger(t, true), "nothing new was applied")
}

func TestConcurrentChargesAreAllDurable(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	first := setup(t, fakepsp.Config{LedgerPath: path})
	const charges = 100

	var wg sync.WaitGroup
	for i := range charges {
		wg.Go(func() {
			_, err := first.client.Charge(t.Context(), visa(fmt.Sprintf("pk_%03d", i)))
			require.NoError(t, err)
		})
	}
	wg.Wait()
	before := first.ledger(t, false)
	require.Len(t, before, charges)
	require.NoError(t, first.provider.Close())

	second := setup(t, fakepsp.Config{LedgerPath: path})
	require.Equal(t, before, second.ledger(t, false), "same charges, same order after a restart")
}

func TestTornLastLineIsCutOff(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	first := setup(t, fakepsp.Config{LedgerPath: path})
	first.charge(t, visa("pk_1"))
	first.charge(t, visa("pk_2"))
	before := first.ledger(t, true)
	require.NoError(t, first.provider.Close())

	intact, err := os.ReadFile(path)
	require.NoError(t, err)
	// A crash in the middle of a write leaves half a line behind.
	torn := append(append([]byte{}, intact...), []byte(`{"id":"py_TORN","idempotency_key":"pk_3","refer`)...)
	require.NoError(t, os.WriteFile(path, torn, 0o644))

	logger, logs := debugLogger()
	second := setup(t, fakepsp.Config{LedgerPath: path, Logger: logger})
	require.Equal(t, before, second.ledger(t, true))
	require.Contains(t, logs.String(), "torn last line")
	_, err = second.client.Lookup(t.Context(), "pk_3")
	require.ErrorIs(t, err, psp.ErrNotFound)

	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, intact, after, "the torn line was cut off the file")

	// New lines start on a clean line boundary.
	second.charge(t, visa("pk_3"))
	require.NoError(t, second.provider.Close())
	third := setup(t, fakepsp.Config{LedgerPath: path})
	require.Len(t, third.ledger(t, true), 3)
}

func TestCorruptLedgerLineIsAnError(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	first := setup(t, fakepsp.Config{LedgerPath: path})
	first.charge(t, visa("pk_1"))
	require.NoError(t, first.provider.Close())

	file, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = file.WriteString("not a record\n")
	require.NoError(t, err)
	require.NoError(t, file.Close())

	_, err = fakepsp.New(fakepsp.Config{LedgerPath: path})
	require.ErrorIs(t, err, fakepsp.ErrCorruptLedger)
	require.ErrorContains(t, err, "line 2")
}

func TestRequestsAfterCloseAreRefused(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	require.NoError(t, b.provider.Close())
	require.NoError(t, b.provider.Close(), "Close is idempotent")

	_, err := b.client.Charge(t.Context(), visa("pk_late"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "status_503")
}

func TestLogsNeverContainPaymentMethods(t *testing.T) {
	t.Parallel()

	logger, logs := debugLogger()
	b := setup(t, fakepsp.Config{
		Logger: logger,
		Faults: faults(
			fakepsp.Rule{On: fakepsp.OnCharge, Fault: fakepsp.FaultErrorAfterApply, P: 1, KeyPrefix: "pk_err"},
			fakepsp.Rule{On: fakepsp.OnCharge, Fault: fakepsp.FaultNotProcessed, P: 1, KeyPrefix: "pk_busy"},
			fakepsp.Rule{On: fakepsp.OnLookup, Fault: fakepsp.FaultUnavailable, P: 1, KeyPrefix: "pk_err"},
		),
	})

	for i, paymentMethod := range []string{fakepsp.PaymentMethodVisa, fakepsp.PaymentMethodDeclined, "pm_card_canary_4242"} {
		for _, prefix := range []string{"pk_ok", "pk_err", "pk_busy"} {
			req := psp.ChargeRequest{Key: fmt.Sprintf("%s_%d", prefix, i), Amount: 100, Currency: "USD", PaymentMethod: paymentMethod, Reference: "ch_1"}
			_, _ = b.client.Charge(t.Context(), req)
			_, _ = b.client.Lookup(t.Context(), req.Key)
		}
	}
	_ = b.do(t, http.MethodPost, "/v1/charges", http.Header{"Idempotency-Key": {"pk_bad"}}, `{"amount":-1,"currency":"USD","payment_method":"pm_card_canary_4242","reference":"x"}`)
	require.NoError(t, b.provider.Close())

	output := logs.String()
	require.Contains(t, output, "fault fired", "the test exercised the logging paths")
	require.Contains(t, output, "charge applied")
	require.NotContains(t, output, "pm_card")
}
