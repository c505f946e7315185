package psp_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/psp"
)

const notificationSecret = "whsec_test_notification_secret"

// signed is a signature header over body made here, by hand, so that the
// parser is checked against the scheme and not against itself.
func signed(secret string, at time.Time, body string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "%d.%s", at.Unix(), body)
	return fmt.Sprintf("t=%d,v1=%s", at.Unix(), hex.EncodeToString(mac.Sum(nil)))
}

// The parser of the fake protocol's notifications, one row a rule: what
// verifies, what each refusal is, what a genuine notification proves.
func TestParseNotification(t *testing.T) {
	t.Parallel()

	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	const (
		chargeOK = `{"id":"evt_1","type":"charge.succeeded","created_at":"2025-03-01T11:59:59Z",` +
			`"data":{"id":"py_1","status":"succeeded","amount":1000,"currency":"EUR","reference":"ch_1","idempotency_key":"pk_1"}}`
		chargeDeclined = `{"id":"evt_2","type":"charge.failed","created_at":"2025-03-01T11:59:59Z",` +
			`"data":{"id":"py_2","status":"failed","amount":1000,"currency":"EUR","reference":"ch_2","decline_code":"insufficient_funds","idempotency_key":"pk_2"}}`
		refundOK = `{"id":"evt_3","type":"refund.succeeded","created_at":"2025-03-01T11:59:59Z",` +
			`"data":{"id":"rf_1","status":"succeeded","charge":"py_1","amount":400,"currency":"EUR","reference":"re_1","idempotency_key":"rk_1"}}`
	)
	header := func(values ...string) http.Header {
		h := http.Header{}
		for _, value := range values {
			h.Add(psp.NotificationSignatureHeader, value)
		}
		return h
	}
	valid := func(body string) http.Header { return header(signed(notificationSecret, now.Add(-time.Second), body)) }
	// data replaces the data object of a charge.succeeded.
	data := func(typ, object string) string {
		return `{"id":"evt_9","type":"` + typ + `","created_at":"2025-03-01T11:59:59Z","data":` + object + `}`
	}

	const (
		held     = `{"id":"py_4","status":"requires_capture","amount":1000,"currency":"EUR","reference":"ch_4","idempotency_key":"pk_4"}`
		captured = `{"id":"py_4","status":"succeeded","amount":1000,"currency":"EUR","reference":"ch_4","amount_captured":600,"idempotency_key":"cpk_4","operation_reference":"cp_4"}`
		canceled = `{"id":"py_4","status":"canceled","amount":1000,"currency":"EUR","reference":"ch_4","idempotency_key":"cxk_4","operation_reference":"cx_4"}`
	)

	created := time.Date(2025, 3, 1, 11, 59, 59, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		header    http.Header
		body      string
		tolerance time.Duration
		want      psp.Notification
		kind      error  // the refusal's kind, when refused
		reason    string // the refusal's reason
	}{
		{
			name: "a charge applied", header: valid(chargeOK), body: chargeOK,
			want: psp.Notification{EventID: "evt_1", EventType: "charge.succeeded", Created: created, Kind: psp.NotificationCharge,
				Reference: "ch_1", ProviderID: "py_1", ProviderKey: "pk_1",
				Charge: psp.Charge{ID: "py_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "EUR", Reference: "ch_1"}},
		},
		{
			name: "a charge declined", header: valid(chargeDeclined), body: chargeDeclined,
			want: psp.Notification{EventID: "evt_2", EventType: "charge.failed", Created: created, Kind: psp.NotificationCharge,
				Reference: "ch_2", ProviderID: "py_2", ProviderKey: "pk_2",
				Charge: psp.Charge{ID: "py_2", Status: psp.StatusFailed, Amount: 1000, Currency: "EUR", Reference: "ch_2", DeclineCode: "insufficient_funds"}},
		},
		{
			name: "a refund applied", header: valid(refundOK), body: refundOK,
			want: psp.Notification{EventID: "evt_3", EventType: "refund.succeeded", Created: created, Kind: psp.NotificationRefund,
				Reference: "re_1", ProviderID: "rf_1", ProviderKey: "rk_1",
				Refund: psp.Refund{ID: "rf_1", Status: psp.StatusSucceeded, Charge: "py_1", Amount: 400, Currency: "EUR", Reference: "re_1"}},
		},
		{
			name: "a type we do not act on is nothing to do", header: valid(data("charge.pending", `{"id":"py_1"}`)), body: data("charge.pending", `{"id":"py_1"}`),
			want: psp.Notification{EventID: "evt_9", EventType: "charge.pending", Created: created, Kind: psp.NotificationIgnored, Reason: "unhandled_type"},
		},
		{
			name: "a secret being rotated: one signature of two verifies", body: chargeOK,
			header: header(signed("whsec_old", now, chargeOK) + "," + strings.TrimPrefix(signed(notificationSecret, now, chargeOK), fmt.Sprintf("t=%d,", now.Unix()))),
			want:   psp.Notification{EventID: "evt_1", EventType: "charge.succeeded", Created: created, Kind: psp.NotificationCharge, Reference: "ch_1", ProviderID: "py_1", ProviderKey: "pk_1", Charge: psp.Charge{ID: "py_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "EUR", Reference: "ch_1"}},
		},
		{
			name: "signed just inside the tolerance", header: header(signed(notificationSecret, now.Add(-4*time.Minute), chargeOK)), body: chargeOK,
			want: psp.Notification{EventID: "evt_1", EventType: "charge.succeeded", Created: created, Kind: psp.NotificationCharge, Reference: "ch_1", ProviderID: "py_1", ProviderKey: "pk_1", Charge: psp.Charge{ID: "py_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "EUR", Reference: "ch_1"}},
		},

		{name: "expired: signed six minutes ago", header: header(signed(notificationSecret, now.Add(-6*time.Minute), chargeOK)), body: chargeOK,
			kind: psp.ErrNotificationExpired, reason: "timestamp_too_old"},
		{name: "expired under a tolerance of ten seconds", header: header(signed(notificationSecret, now.Add(-30*time.Second), chargeOK)), body: chargeOK,
			tolerance: 10 * time.Second, kind: psp.ErrNotificationExpired, reason: "timestamp_too_old"},
		{name: "signed six minutes ahead", header: header(signed(notificationSecret, now.Add(6*time.Minute), chargeOK)), body: chargeOK,
			kind: psp.ErrNotificationExpired, reason: "timestamp_in_future"},
		{name: "wrong secret", header: header(signed("whsec_someone_else", now, chargeOK)), body: chargeOK,
			kind: psp.ErrNotificationForged, reason: "signature_mismatch"},
		{name: "altered body under the genuine signature", header: valid(chargeOK), body: strings.Replace(chargeOK, `"amount":1000`, `"amount":100000`, 1),
			kind: psp.ErrNotificationForged, reason: "signature_mismatch"},
		{name: "a time altered under the genuine signature",
			header: header(strings.Replace(signed(notificationSecret, now.Add(-10*time.Minute), chargeOK), fmt.Sprint(now.Add(-10*time.Minute).Unix()), fmt.Sprint(now.Unix()), 1)),
			body:   chargeOK, kind: psp.ErrNotificationForged, reason: "signature_mismatch"},
		{name: "an expired notification with a wrong signature is forged", header: header(signed("whsec_someone_else", now.Add(-time.Hour), chargeOK)), body: chargeOK,
			kind: psp.ErrNotificationForged, reason: "signature_mismatch"},
		{name: "unsigned", header: http.Header{}, body: chargeOK, kind: psp.ErrNotificationForged, reason: "signature_missing"},
		{name: "no v1 signature", header: header(fmt.Sprintf("t=%d", now.Unix())), body: chargeOK, kind: psp.ErrNotificationForged, reason: "signature_missing"},
		{name: "only another scheme", header: header(fmt.Sprintf("t=%d,v0=abcd", now.Unix())), body: chargeOK, kind: psp.ErrNotificationForged, reason: "signature_missing"},
		{name: "no time", header: header("v1=abcd"), body: chargeOK, kind: psp.ErrNotificationMalformed, reason: "signature_header_invalid"},
		{name: "a time that is not a number", header: header("t=soon,v1=abcd"), body: chargeOK, kind: psp.ErrNotificationMalformed, reason: "signature_header_invalid"},
		{name: "two times", header: header(fmt.Sprintf("t=1,%s", signed(notificationSecret, now, chargeOK))), body: chargeOK, kind: psp.ErrNotificationMalformed, reason: "signature_header_invalid"},
		{name: "not key=value", header: header("garbage"), body: chargeOK, kind: psp.ErrNotificationMalformed, reason: "signature_header_invalid"},
		{name: "two headers", header: header(signed(notificationSecret, now, chargeOK), signed(notificationSecret, now, chargeOK)), body: chargeOK,
			kind: psp.ErrNotificationMalformed, reason: "signature_header_invalid"},

		{name: "a signed body that is not JSON", header: valid("not json"), body: "not json", kind: psp.ErrNotificationMalformed, reason: "body_invalid"},
		{name: "data that is not an object", header: valid(data("charge.succeeded", `"py_1"`)), body: data("charge.succeeded", `"py_1"`),
			kind: psp.ErrNotificationMalformed, reason: "body_invalid"},
		{name: "no id", header: valid(strings.Replace(chargeOK, `"id":"evt_1",`, "", 1)), body: strings.Replace(chargeOK, `"id":"evt_1",`, "", 1),
			kind: psp.ErrNotificationMalformed, reason: "field_missing"},
		{name: "no type", header: valid(strings.Replace(chargeOK, `"type":"charge.succeeded",`, "", 1)), body: strings.Replace(chargeOK, `"type":"charge.succeeded",`, "", 1),
			kind: psp.ErrNotificationMalformed, reason: "field_missing"},
		{name: "no created_at", header: valid(strings.Replace(chargeOK, `"created_at":"2025-03-01T11:59:59Z",`, "", 1)), body: strings.Replace(chargeOK, `"created_at":"2025-03-01T11:59:59Z",`, "", 1),
			kind: psp.ErrNotificationMalformed, reason: "field_missing"},
		{name: "no data", header: valid(data("charge.succeeded", "null")), body: data("charge.succeeded", "null"), kind: psp.ErrNotificationMalformed, reason: "field_missing"},
		{name: "a charge without a reference", header: valid(strings.Replace(chargeOK, `,"reference":"ch_1"`, "", 1)), body: strings.Replace(chargeOK, `,"reference":"ch_1"`, "", 1),
			kind: psp.ErrNotificationMalformed, reason: "field_missing"},
		{name: "a charge without an id", header: valid(strings.Replace(chargeOK, `"id":"py_1",`, "", 1)), body: strings.Replace(chargeOK, `"id":"py_1",`, "", 1),
			kind: psp.ErrNotificationMalformed, reason: "field_missing"},
		{name: "a charge without an amount", header: valid(strings.Replace(chargeOK, `"amount":1000,`, "", 1)), body: strings.Replace(chargeOK, `"amount":1000,`, "", 1),
			kind: psp.ErrNotificationMalformed, reason: "field_missing"},
		{name: "a charge without a currency", header: valid(strings.Replace(chargeOK, `"currency":"EUR",`, "", 1)), body: strings.Replace(chargeOK, `"currency":"EUR",`, "", 1),
			kind: psp.ErrNotificationMalformed, reason: "field_missing"},
		{name: "a decline without its code", header: valid(strings.Replace(chargeDeclined, `"decline_code":"insufficient_funds",`, "", 1)),
			body: strings.Replace(chargeDeclined, `"decline_code":"insufficient_funds",`, "", 1), kind: psp.ErrNotificationMalformed, reason: "field_missing"},
		{name: "a refund without its charge", header: valid(strings.Replace(refundOK, `"charge":"py_1",`, "", 1)), body: strings.Replace(refundOK, `"charge":"py_1",`, "", 1),
			kind: psp.ErrNotificationMalformed, reason: "field_missing"},
		{name: "charge.succeeded whose charge failed", header: valid(strings.Replace(chargeOK, `"status":"succeeded"`, `"status":"failed"`, 1)),
			body: strings.Replace(chargeOK, `"status":"succeeded"`, `"status":"failed"`, 1), kind: psp.ErrNotificationMalformed, reason: "type_mismatch"},
		{name: "charge.failed whose charge succeeded", header: valid(strings.Replace(chargeDeclined, `"status":"failed"`, `"status":"succeeded"`, 1)),
			body: strings.Replace(chargeDeclined, `"status":"failed"`, `"status":"succeeded"`, 1), kind: psp.ErrNotificationMalformed, reason: "type_mismatch"},
		{name: "refund.succeeded whose refund is pending", header: valid(strings.Replace(refundOK, `"status":"succeeded"`, `"status":"pending"`, 1)),
			body: strings.Replace(refundOK, `"status":"succeeded"`, `"status":"pending"`, 1), kind: psp.ErrNotificationMalformed, reason: "type_mismatch"},

		// A charge captured later: authorized, captured, canceled.
		{name: "a charge authorized", header: valid(data("charge.authorized", held)), body: data("charge.authorized", held),
			want: psp.Notification{EventID: "evt_9", EventType: "charge.authorized", Created: created, Kind: psp.NotificationCharge,
				Reference: "ch_4", ProviderID: "py_4", ProviderKey: "pk_4",
				Charge: psp.Charge{ID: "py_4", Status: psp.StatusRequiresCapture, Amount: 1000, Currency: "EUR", Reference: "ch_4"}}},
		{name: "a charge captured", header: valid(data("charge.captured", captured)), body: data("charge.captured", captured),
			want: psp.Notification{EventID: "evt_9", EventType: "charge.captured", Created: created, Kind: psp.NotificationCapture,
				Reference: "cp_4", ProviderID: "py_4", ProviderKey: "cpk_4",
				Charge: psp.Charge{ID: "py_4", Status: psp.StatusSucceeded, Amount: 1000, Currency: "EUR", Reference: "ch_4", AmountCaptured: 600}}},
		{name: "a charge canceled", header: valid(data("charge.canceled", canceled)), body: data("charge.canceled", canceled),
			want: psp.Notification{EventID: "evt_9", EventType: "charge.canceled", Created: created, Kind: psp.NotificationCancel,
				Reference: "cx_4", ProviderID: "py_4", ProviderKey: "cxk_4",
				Charge: psp.Charge{ID: "py_4", Status: psp.StatusCanceled, Amount: 1000, Currency: "EUR", Reference: "ch_4"}}},
		{name: "charge.authorized whose charge succeeded", header: valid(data("charge.authorized", captured)), body: data("charge.authorized", captured),
			kind: psp.ErrNotificationMalformed, reason: "type_mismatch"},
		{name: "charge.captured without an amount captured", header: valid(data("charge.captured", strings.Replace(captured, `,"amount_captured":600`, "", 1))),
			body: data("charge.captured", strings.Replace(captured, `,"amount_captured":600`, "", 1)), kind: psp.ErrNotificationMalformed, reason: "type_mismatch"},
		{name: "charge.captured without the operation's reference", header: valid(data("charge.captured", strings.Replace(captured, `,"operation_reference":"cp_4"`, "", 1))),
			body: data("charge.captured", strings.Replace(captured, `,"operation_reference":"cp_4"`, "", 1)), kind: psp.ErrNotificationMalformed, reason: "field_missing"},
		{name: "charge.canceled whose charge is held", header: valid(data("charge.canceled", held)), body: data("charge.canceled", held),
			kind: psp.ErrNotificationMalformed, reason: "type_mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			n, err := psp.ParseNotification(notificationSecret, tc.header, []byte(tc.body), now, tc.tolerance)
			if tc.kind == nil {
				require.NoError(t, err)
				require.False(t, n.SignedAt.IsZero())
				n.SignedAt = time.Time{}
				require.Equal(t, tc.want, n)
				require.Equal(t, tc.want.Kind != psp.NotificationIgnored, n.Actionable())
				return
			}
			require.ErrorIs(t, err, tc.kind)
			var refusal *psp.NotificationError
			require.ErrorAs(t, err, &refusal)
			require.Equal(t, tc.reason, refusal.Reason, "error: %v", err)
			for _, other := range []error{psp.ErrNotificationForged, psp.ErrNotificationExpired, psp.ErrNotificationMalformed} {
				if other != tc.kind {
					require.NotErrorIs(t, err, other, "one kind a refusal")
				}
			}
			require.NotContains(t, err.Error(), notificationSecret)
			require.Equal(t, psp.Notification{}, n, "nothing of a refused notification is returned")
		})
	}
}

// Without a secret nothing can be verified: the receiver's own
// misconfiguration, not a refusal of the sender's notification.
func TestParseNotificationWithoutSecret(t *testing.T) {
	t.Parallel()

	body := `{"id":"evt_1"}`
	header := http.Header{}
	header.Set(psp.NotificationSignatureHeader, signed("", time.Now(), body))
	_, err := psp.ParseNotification("", header, []byte(body), time.Now(), 0)
	require.ErrorIs(t, err, psp.ErrNoNotificationSecret)
	var refusal *psp.NotificationError
	require.False(t, errors.As(err, &refusal), "not a refusal the sender caused")
}

// The time check on its own, as psp/stripe uses it: either way from now,
// the default tolerance when none is given.
func TestCheckNotificationTime(t *testing.T) {
	t.Parallel()

	now := time.Unix(1_700_000_000, 0)
	require.NoError(t, psp.CheckNotificationTime(now.Add(-psp.DefaultNotificationTolerance), now, 0))
	require.NoError(t, psp.CheckNotificationTime(now.Add(psp.DefaultNotificationTolerance), now, -1))
	require.ErrorIs(t, psp.CheckNotificationTime(now.Add(-psp.DefaultNotificationTolerance-time.Second), now, 0), psp.ErrNotificationExpired)
	require.ErrorIs(t, psp.CheckNotificationTime(now.Add(2*time.Second), now, time.Second), psp.ErrNotificationExpired)
	require.NoError(t, psp.CheckNotificationTime(time.Now(), time.Time{}, 0), "a zero now is the clock's")

	signedAt, err := psp.SignatureTime("t=1700000000,v1=00")
	require.NoError(t, err)
	require.Equal(t, now, signedAt)
	_, err = psp.SignatureTime("v1=00")
	require.ErrorIs(t, err, psp.ErrNotificationMalformed)
}

// A capture's and a cancel's notifications are answers to act on; an
// authorization's succeeded charge is held when the charge was sent to be
// captured later, and is what it says otherwise.
func TestNotificationAnswers(t *testing.T) {
	t.Parallel()

	for kind, actionable := range map[psp.NotificationKind]bool{
		psp.NotificationCharge: true, psp.NotificationRefund: true, psp.NotificationCapture: true,
		psp.NotificationCancel: true, psp.NotificationIgnored: false, "": false,
	} {
		require.Equal(t, actionable, psp.Notification{Kind: kind}.Actionable(), kind)
	}

	authorised := psp.Charge{ID: "psp_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "EUR", Reference: "ch_1"}
	held := authorised
	held.Status = psp.StatusRequiresCapture
	declined := psp.Charge{ID: "psp_1", Status: psp.StatusFailed, Amount: 1000, Currency: "EUR", Reference: "ch_1", DeclineCode: "insufficient_funds"}

	authorization := psp.Notification{Kind: psp.NotificationCharge, Charge: authorised, Authorization: true}
	require.Equal(t, held, authorization.AnswerFor(true))
	require.Equal(t, authorised, authorization.AnswerFor(false))
	authorization.Charge = declined
	require.Equal(t, declined, authorization.AnswerFor(true), "a decline is a decline")

	charged := psp.Notification{Kind: psp.NotificationCharge, Charge: authorised}
	require.Equal(t, authorised, charged.AnswerFor(true), "a notification that says captured is believed")
}
