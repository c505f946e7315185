package psp_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/psp"
)

func TestClassifyOperation(t *testing.T) {
	t.Parallel()

	answered := func(op psp.Op, status int, body string) psp.Attempt {
		return psp.Attempt{Op: op, GotConn: true, WroteRequest: true, StatusCode: status, Body: []byte(body)}
	}
	const (
		captured = `{"id":"py_1","status":"succeeded","amount":1000,"currency":"USD","reference":"ch_1","amount_captured":600}`
		canceled = `{"id":"py_1","status":"canceled","amount":1000,"currency":"USD","reference":"ch_1","canceled_reason":"requested"}`
		held     = `{"id":"py_1","status":"requires_capture","amount":1000,"currency":"USD","reference":"ch_1","hold_expires_at":"2030-01-01T00:00:00Z"}`
	)
	charge := psp.Charge{ID: "py_1", Amount: 1000, Currency: "USD", Reference: "ch_1"}
	with := func(status psp.Status, captured int64) psp.Charge {
		c := charge
		c.Status, c.AmountCaptured = status, captured
		return c
	}

	for _, op := range []psp.Op{psp.OpCapture, psp.OpCancel} {
		require.True(t, op.Applies(), op)
		for _, code := range []string{psp.CodeChargeNotCapturable, psp.CodeCaptureExceedsAuthorization, psp.CodeHoldExpired} {
			got, err := psp.ClassifyOperation(answered(op, 409, `{"error":{"code":"`+code+`"}}`))
			require.NoError(t, err, "%s %s: a refusal is an answer", op, code)
			require.Equal(t, psp.Charge{Status: psp.StatusFailed, DeclineCode: code}, got)
		}
		// Any other 409 is about the key: the operation may have applied.
		_, err := psp.ClassifyOperation(answered(op, 409, `{"error":{"code":"idempotency_key_in_use"}}`))
		require.ErrorIs(t, err, psp.ErrUnknownOutcome)
		_, err = psp.ClassifyOperation(answered(op, 409, `{"error":{"code":"refund_exceeds_charge"}}`))
		require.ErrorIs(t, err, psp.ErrUnknownOutcome)
		_, err = psp.ClassifyOperation(answered(op, 429, `{"error":{"code":"rate_limited"}}`))
		require.ErrorIs(t, err, psp.ErrNotApplied)
		_, err = psp.ClassifyOperation(psp.Attempt{Op: op, Err: io.ErrUnexpectedEOF, GotConn: true, WroteRequest: true})
		require.ErrorIs(t, err, psp.ErrUnknownOutcome)

		got, err := psp.ClassifyOperation(answered(op, 200, captured))
		require.NoError(t, err)
		require.Equal(t, with(psp.StatusSucceeded, 600), got)
		got, err = psp.ClassifyOperation(answered(op, 200, canceled))
		require.NoError(t, err)
		require.Equal(t, with(psp.StatusCanceled, 0), got)
	}

	// A lookup's answer about a charge captured later is an answer, in
	// each of its states; the refusal codes mean nothing to a charge.
	for body, want := range map[string]psp.Charge{held: with(psp.StatusRequiresCapture, 0), captured: with(psp.StatusSucceeded, 600), canceled: with(psp.StatusCanceled, 0)} {
		got, err := psp.Classify(answered(psp.OpLookup, 200, body))
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := psp.Classify(answered(psp.OpCharge, 409, `{"error":{"code":"hold_expired"}}`))
	require.ErrorIs(t, err, psp.ErrUnknownOutcome)
	// A refund is never in a charge's hold states.
	_, err = psp.ClassifyRefund(answered(psp.OpRefund, 200, `{"id":"rf_1","status":"requires_capture","charge":"py_1","amount":1,"currency":"USD","reference":"re_1"}`))
	require.ErrorIs(t, err, psp.ErrUnknownOutcome)
}

func TestClientCaptureAndCancelSendTheWireRequest(t *testing.T) {
	t.Parallel()

	type received struct {
		path, key, tag string
		body           map[string]any
	}
	got := make(chan received, 4)
	answer := `{"id":"py_1","status":"succeeded","amount":1000,"currency":"USD","reference":"ch_1","amount_captured":600}`
	server, requests := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		got <- received{r.URL.Path, r.Header.Get("Idempotency-Key"), r.Header.Get("X-Tenant-Tag"), body}
		if r.URL.Path == "/v1/charges/py_1/cancel" {
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"error":{"code":"charge_not_capturable"}}`)
			return
		}
		_, _ = io.WriteString(w, answer)
	})
	client := psp.NewClient(psp.Config{BaseURL: server.URL})
	caps := client.Capabilities()
	require.True(t, caps.SeparateCapture)
	require.Equal(t, psp.DefaultHoldWindow, caps.Hold())

	req := psp.OperationRequest{Key: "cf_cp_1", Charge: "py_1", Amount: 600, Currency: "USD", Reference: "cp_1", ChargeReference: "ch_1", Tag: "tn_1"}
	charge, err := client.Capture(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, psp.Charge{ID: "py_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "USD", Reference: "ch_1", AmountCaptured: 600}, charge)
	require.Equal(t, received{"/v1/charges/py_1/capture", "cf_cp_1", "tn_1", map[string]any{"amount": 600.0, "reference": "cp_1"}}, <-got)

	req = psp.OperationRequest{Key: "cf_cx_1", Charge: "py_1", Amount: 1000, Currency: "USD", Reference: "cx_1", ChargeReference: "ch_1"}
	charge, err = client.Cancel(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, req.Refused(psp.CodeChargeNotCapturable), charge)
	require.Equal(t, received{"/v1/charges/py_1/cancel", "cf_cx_1", "", map[string]any{"reference": "cx_1"}}, <-got)

	// A charge to capture later says so; any other says nothing new.
	_, _ = client.Charge(t.Context(), psp.ChargeRequest{Key: "cf_ch_1", Amount: 1000, Currency: "USD", PaymentMethod: "pm_card_visa", Reference: "ch_1", CaptureLater: true})
	require.Equal(t, false, (<-got).body["capture"])
	_, _ = client.Charge(t.Context(), psp.ChargeRequest{Key: "cf_ch_2", Amount: 1000, Currency: "USD", PaymentMethod: "pm_card_visa", Reference: "ch_2"})
	require.NotContains(t, (<-got).body, "capture")

	// What must not be sent is not.
	for _, bad := range []psp.OperationRequest{{Charge: "py_1", Amount: 1}, {Key: "k", Amount: 1}, {Key: "k", Charge: "py_1"}} {
		_, err := client.Capture(t.Context(), bad)
		require.ErrorIs(t, err, psp.ErrNotApplied)
	}
	_, err = client.Cancel(t.Context(), psp.OperationRequest{Key: "k"})
	require.ErrorIs(t, err, psp.ErrNotApplied)
	require.EqualValues(t, 4, requests.Load())
}

func TestClientDeclaresItsHoldWindow(t *testing.T) {
	t.Parallel()

	client := psp.NewClient(psp.Config{Capabilities: psp.Capabilities{HoldWindow: 90 * time.Minute}})
	require.True(t, client.Capabilities().SeparateCapture)
	require.Equal(t, 90*time.Minute, client.Capabilities().Hold())
}
