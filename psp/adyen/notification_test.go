package adyen

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/psp"
)

// hmacKey is the tests' HMAC key: the hex of "key of the chargeflow
// tests!!!!!", as the Customer Area shows a key.
const hmacKey = "6b6579206f662074686520636861726765666c6f772074657374732121212121"

// The signature is checked against vectors computed outside Go, by
// openssl, from the algorithm Adyen documents:
//
//	echo -n "$SIGNING_STRING" | openssl dgst -sha256 -mac HMAC -macopt hexkey:$KEY -binary | base64
//
// The first is the vector Adyen's own Go library tests its validator
// with; the second is ours, with an empty originalReference.
func TestSignatureVectors(t *testing.T) {
	t.Parallel()

	for _, v := range []struct {
		key       string
		item      notificationItem
		signature string
	}{
		{"DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00", notificationItem{
			PSPReference: "pspReference", OriginalReference: "originalReference", MerchantAccountCode: "merchantAccount",
			MerchantReference: "reference", Amount: &notificationAmount{Currency: "EUR", Value: "1000"}, EventCode: "EVENT", Success: "true",
		}, "ipnxGCaUZ4l8TUW75a71/ghd2Fe5ffvX0pV4TLTntIc="},
		{hmacKey, notificationItem{
			PSPReference: testPSP, MerchantAccountCode: testMerchant, MerchantReference: "ch_1",
			Amount: &notificationAmount{Currency: "EUR", Value: "1000"}, EventCode: "AUTHORISATION", Success: "true",
		}, "3gN+1sSGk9moK082KN0aTvzuAhh4I9PKLvkICcBjG3U="},
	} {
		key, err := hex.DecodeString(v.key)
		require.NoError(t, err)
		require.Equal(t, v.signature, sign(v.key, fields(v.item)), "the test's own signer agrees with openssl")
		v.item.AdditionalData = map[string]json.RawMessage{"hmacSignature": json.RawMessage(`"` + v.signature + `"`)}
		require.Nil(t, verify(key, &v.item))
		v.item.Success = "false"
		require.NotNil(t, verify(key, &v.item))
	}
}

// item is a NotificationRequestItem as Adyen sends it, before signing; its
// merchant account is testMerchant unless Account says otherwise.
type item struct {
	Account                                                                        string
	PSPReference, OriginalReference, MerchantReference, EventCode, Success, Reason string
	Value                                                                          int64
	Currency                                                                       string
}

// fields is the signed fields of a notificationItem, for the test's signer.
func fields(i notificationItem) item {
	return item{Account: i.MerchantAccountCode, PSPReference: i.PSPReference, OriginalReference: i.OriginalReference, MerchantReference: i.MerchantReference,
		EventCode: i.EventCode, Success: i.Success, Value: mustInt(i.Amount.Value), Currency: i.Amount.Currency}
}

func mustInt(n json.Number) int64 {
	v, err := n.Int64()
	if err != nil {
		panic(err)
	}
	return v
}

// sign is the test's own signer, written from Adyen's documentation and
// checked against openssl above: base64(HMAC-SHA256(hex-decoded key,
// "pspReference:originalReference:merchantAccountCode:merchantReference:
// value:currency:eventCode:success")).
func sign(keyHex string, i item) string {
	key, err := hex.DecodeString(keyHex)
	if err != nil {
		panic(err)
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s:%s:%s:%s:%d:%s:%s:%s", i.PSPReference, i.OriginalReference, cmp.Or(i.Account, testMerchant), i.MerchantReference,
		i.Value, i.Currency, i.EventCode, i.Success)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// signed is i as a JSON item signed with keyHex; tamper, when given,
// changes the JSON object after signing.
func signed(keyHex string, i item, tamper ...func(map[string]any)) map[string]any {
	object := map[string]any{
		"additionalData":      map[string]any{"hmacSignature": sign(keyHex, i), "expiryDate": "03/2030"},
		"amount":              map[string]any{"currency": i.Currency, "value": i.Value},
		"eventCode":           i.EventCode,
		"eventDate":           "2025-03-01T13:00:00+01:00",
		"merchantAccountCode": cmp.Or(i.Account, testMerchant),
		"merchantReference":   i.MerchantReference,
		"originalReference":   i.OriginalReference,
		"paymentMethod":       "visa",
		"pspReference":        i.PSPReference,
		"reason":              i.Reason,
		"success":             i.Success,
	}
	for _, f := range tamper {
		f(object)
	}
	return object
}

// batch is Adyen's webhook body around items.
func batch(items ...map[string]any) []byte {
	wrapped := make([]map[string]any, 0, len(items))
	for _, i := range items {
		wrapped = append(wrapped, map[string]any{"NotificationRequestItem": i})
	}
	body, err := json.Marshal(map[string]any{"live": "false", "notificationItems": wrapped})
	if err != nil {
		panic(err)
	}
	return body
}

var (
	itemAuthorised = item{PSPReference: testPSP, MerchantReference: "ch_1", EventCode: "AUTHORISATION", Success: "true", Value: 1000, Currency: "EUR", Reason: "044925:1111:03/2030"}
	itemRefused    = item{PSPReference: testPSP, MerchantReference: "ch_1", EventCode: "AUTHORISATION", Success: "false", Value: 1000, Currency: "EUR", Reason: "Not enough balance"}
	itemRefunded   = item{PSPReference: testRefundPSP, OriginalReference: testPSP, MerchantReference: "re_1", EventCode: "REFUND", Success: "true", Value: 400, Currency: "EUR"}
	itemCaptured   = item{PSPReference: testCapturePSP, OriginalReference: testPSP, MerchantReference: "cp_1", EventCode: "CAPTURE", Success: "true", Value: 600, Currency: "EUR"}
	itemCancelled  = item{PSPReference: testCancelPSP, OriginalReference: testPSP, MerchantReference: "cx_1", EventCode: "CANCELLATION", Success: "true", Value: 1000, Currency: "EUR"}
)

// with is it changed by edit.
func with(it item, edit func(*item)) item {
	edit(&it)
	return it
}

func TestParseNotifications(t *testing.T) {
	t.Parallel()

	created := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	charge := func(id string, status psp.Status, decline string) psp.Notification {
		return psp.Notification{EventID: testPSP + ":AUTHORISATION:" + map[psp.Status]string{psp.StatusSucceeded: "true", psp.StatusFailed: "false"}[status],
			EventType: "AUTHORISATION", Created: created, Kind: psp.NotificationCharge, Reference: "ch_1", ProviderID: id,
			Charge: psp.Charge{ID: id, Status: status, Amount: 1000, Currency: "EUR", Reference: "ch_1", DeclineCode: decline}, Authorization: true}
	}
	// operation is a capture's or a cancel's notification of it, whose
	// answer is the payment as the operation left it.
	operation := func(it item, kind psp.NotificationKind, answer psp.Charge) psp.Notification {
		return psp.Notification{EventID: it.PSPReference + ":" + it.EventCode + ":" + it.Success, EventType: it.EventCode, Created: created,
			Kind: kind, Reference: it.MerchantReference, ProviderID: it.PSPReference, Charge: answer}
	}
	captureRefused := with(itemCaptured, func(i *item) { i.Success, i.Reason = "false", "Insufficient balance on payment pm_canary" })
	captureFailed := with(itemCaptured, func(i *item) { i.EventCode, i.Reason = "CAPTURE_FAILED", "Capture rejected by card scheme pm_canary" })
	cancelRefused := with(itemCancelled, func(i *item) { i.Success, i.Reason = "false", "Payment already captured pm_canary" })
	refund := func(status psp.Status, failure string) psp.Notification {
		success := "true"
		if status == psp.StatusFailed {
			success = "false"
		}
		return psp.Notification{EventID: testRefundPSP + ":REFUND:" + success, EventType: "REFUND", Created: created,
			Kind: psp.NotificationRefund, Reference: "re_1", ProviderID: testRefundPSP,
			Refund: psp.Refund{ID: testRefundPSP, Status: status, Charge: testPSP, Amount: 400, Currency: "EUR", Reference: "re_1", FailureCode: failure}}
	}
	ignored := func(it item) psp.Notification {
		return psp.Notification{EventID: it.PSPReference + ":" + it.EventCode + ":" + it.Success, EventType: it.EventCode, Created: created,
			Kind: psp.NotificationIgnored, Reason: "unhandled_type", Reference: it.MerchantReference, ProviderID: it.PSPReference}
	}
	declinedBecause := func(reason string) item { return with(itemRefused, func(i *item) { i.Reason = reason }) }

	for _, tc := range []struct {
		name string
		body []byte
		want []psp.Notification
	}{
		{"an AUTHORISATION that succeeded is a charge", batch(signed(hmacKey, itemAuthorised)), []psp.Notification{charge(testPSP, psp.StatusSucceeded, "")}},
		{"an AUTHORISATION itemRefused for balance", batch(signed(hmacKey, itemRefused)), []psp.Notification{charge(testPSP, psp.StatusFailed, "insufficient_funds")}},
		{"an AUTHORISATION itemRefused", batch(signed(hmacKey, declinedBecause("Refused"))), []psp.Notification{charge(testPSP, psp.StatusFailed, "generic_decline")}},
		{"an AUTHORISATION itemRefused for its expiry", batch(signed(hmacKey, declinedBecause("Expired Card"))), []psp.Notification{charge(testPSP, psp.StatusFailed, "expired_card")}},
		{"an AUTHORISATION itemRefused for its CVC", batch(signed(hmacKey, declinedBecause("CVC Declined"))), []psp.Notification{charge(testPSP, psp.StatusFailed, "incorrect_cvc")}},
		{"an AUTHORISATION itemRefused for a reason we do not map", batch(signed(hmacKey, declinedBecause("Issuer Suspected Fraud pm_canary"))),
			[]psp.Notification{charge(testPSP, psp.StatusFailed, "adyen_refusal")}},
		{"an AUTHORISATION itemRefused without a reason", batch(signed(hmacKey, declinedBecause(""))), []psp.Notification{charge(testPSP, psp.StatusFailed, "adyen_refusal")}},
		{"a REFUND that succeeded is a refund", batch(signed(hmacKey, itemRefunded)), []psp.Notification{refund(psp.StatusSucceeded, "")}},
		{"a REFUND that failed is a failed refund", batch(signed(hmacKey, with(itemRefunded, func(i *item) { i.Success, i.Reason = "false", "Insufficient balance pm_canary" }))),
			[]psp.Notification{refund(psp.StatusFailed, "refund_failed")}},
		{"a CAPTURE that succeeded is the payment captured", batch(signed(hmacKey, itemCaptured)), []psp.Notification{
			operation(itemCaptured, psp.NotificationCapture, psp.Charge{ID: testPSP, Status: psp.StatusSucceeded, Currency: "EUR", AmountCaptured: 600})}},
		{"a CAPTURE that failed is the capture refused", batch(signed(hmacKey, captureRefused)), []psp.Notification{
			operation(captureRefused, psp.NotificationCapture, psp.Charge{ID: testPSP, Status: psp.StatusFailed, Amount: 600, Currency: "EUR", DeclineCode: "capture_refused"})}},
		{"a CAPTURE_FAILED is the capture failed", batch(signed(hmacKey, captureFailed)), []psp.Notification{
			operation(captureFailed, psp.NotificationCapture, psp.Charge{ID: testPSP, Status: psp.StatusFailed, Amount: 600, Currency: "EUR", DeclineCode: "capture_failed"})}},
		{"a CAPTURE_FAILED is a failure whatever its success", batch(signed(hmacKey, with(captureFailed, func(i *item) { i.Success = "false" }))), []psp.Notification{
			operation(with(captureFailed, func(i *item) { i.Success = "false" }), psp.NotificationCapture,
				psp.Charge{ID: testPSP, Status: psp.StatusFailed, Amount: 600, Currency: "EUR", DeclineCode: "capture_failed"})}},
		{"a CANCELLATION that succeeded is the payment released", batch(signed(hmacKey, itemCancelled)), []psp.Notification{
			operation(itemCancelled, psp.NotificationCancel, psp.Charge{ID: testPSP, Status: psp.StatusCanceled, Amount: 1000, Currency: "EUR"})}},
		{"a CANCELLATION that failed is the cancel refused", batch(signed(hmacKey, cancelRefused)), []psp.Notification{
			operation(cancelRefused, psp.NotificationCancel, psp.Charge{ID: testPSP, Status: psp.StatusFailed, Amount: 1000, Currency: "EUR", DeclineCode: "cancel_refused"})}},
		{"other event codes are nothing to do", batch(
			signed(hmacKey, with(itemAuthorised, func(i *item) { i.EventCode = "EXPIRE" })),
			signed(hmacKey, with(itemRefunded, func(i *item) { i.EventCode = "REFUND_FAILED" })),
			signed(hmacKey, with(itemCancelled, func(i *item) { i.EventCode, i.Success = "TECHNICAL_CANCEL", "false" })),
		), []psp.Notification{
			ignored(with(itemAuthorised, func(i *item) { i.EventCode = "EXPIRE" })),
			ignored(with(itemRefunded, func(i *item) { i.EventCode = "REFUND_FAILED" })),
			ignored(with(itemCancelled, func(i *item) { i.EventCode, i.Success = "TECHNICAL_CANCEL", "false" })),
		}},
		{"a batch is read in order", batch(signed(hmacKey, itemRefunded), signed(hmacKey, itemAuthorised), signed(hmacKey, itemRefused)),
			[]psp.Notification{refund(psp.StatusSucceeded, ""), charge(testPSP, psp.StatusSucceeded, ""), charge(testPSP, psp.StatusFailed, "insufficient_funds")}},
		{"an eventDate that does not parse leaves Created zero", batch(signed(hmacKey, itemAuthorised, func(o map[string]any) { o["eventDate"] = "yesterday" })),
			[]psp.Notification{func() psp.Notification {
				n := charge(testPSP, psp.StatusSucceeded, "")
				n.Created = time.Time{}
				return n
			}()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got, err := ParseNotifications(hmacKey, tc.body)
			require.NoError(t, err)
			require.Len(t, got, len(tc.want))
			for i := range got {
				require.True(t, tc.want[i].Created.Equal(got[i].Created), "created %v, want %v", got[i].Created, tc.want[i].Created)
				got[i].Created = tc.want[i].Created
				require.True(t, got[i].SignedAt.IsZero(), "Adyen signs no time")
			}
			require.Equal(t, tc.want, got)
			for _, n := range got {
				require.NotContains(t, n.Charge.DeclineCode+n.Refund.FailureCode+n.Reason, "canary")
			}
		})
	}
}

// The duplicates of one event carry one EventID, and the outcomes of one
// payment carry different ones.
func TestNotificationEventIDs(t *testing.T) {
	t.Parallel()

	got, err := ParseNotifications(hmacKey, batch(signed(hmacKey, itemAuthorised), signed(hmacKey, itemAuthorised), signed(hmacKey, itemRefused)))
	require.NoError(t, err)
	require.Equal(t, got[0].EventID, got[1].EventID)
	require.NotEqual(t, got[0].EventID, got[2].EventID)
}

func TestParseNotificationsRefusals(t *testing.T) {
	t.Parallel()

	const otherKey = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	set := func(name string, value any) func(map[string]any) {
		return func(o map[string]any) { o[name] = value }
	}
	for _, tc := range []struct {
		name   string
		body   []byte
		kind   error
		reason string
	}{
		{"the amount changed after signing", batch(signed(hmacKey, itemAuthorised, set("amount", map[string]any{"currency": "EUR", "value": 100000}))),
			psp.ErrNotificationForged, "signature_mismatch"},
		{"the reference changed after signing", batch(signed(hmacKey, itemAuthorised, set("merchantReference", "ch_2"))),
			psp.ErrNotificationForged, "signature_mismatch"},
		{"the outcome changed after signing", batch(signed(hmacKey, itemRefused, set("success", "true"))),
			psp.ErrNotificationForged, "signature_mismatch"},
		{"the event changed after signing", batch(signed(hmacKey, itemRefunded, set("eventCode", "AUTHORISATION"))),
			psp.ErrNotificationForged, "signature_mismatch"},
		{"the itemRefunded payment changed after signing", batch(signed(hmacKey, itemRefunded, set("originalReference", "8816118280270000"))),
			psp.ErrNotificationForged, "signature_mismatch"},
		{"the merchant account changed after signing", batch(signed(hmacKey, itemAuthorised, set("merchantAccountCode", "Other"))),
			psp.ErrNotificationForged, "signature_mismatch"},
		{"signed with another key", batch(signed(otherKey, itemAuthorised)), psp.ErrNotificationForged, "signature_mismatch"},
		{"one forged item refuses the batch", batch(signed(hmacKey, itemRefunded), signed(otherKey, itemAuthorised), signed(hmacKey, itemRefused)),
			psp.ErrNotificationForged, "signature_mismatch"},
		{"no signature", batch(signed(hmacKey, itemAuthorised, set("additionalData", map[string]any{"expiryDate": "03/2030"}))),
			psp.ErrNotificationForged, "signature_missing"},
		{"no additionalData", batch(signed(hmacKey, itemAuthorised, func(o map[string]any) { delete(o, "additionalData") })),
			psp.ErrNotificationForged, "signature_missing"},
		{"an empty signature", batch(signed(hmacKey, itemAuthorised, set("additionalData", map[string]any{"hmacSignature": ""}))),
			psp.ErrNotificationForged, "signature_missing"},
		{"a signature that is not base64", batch(signed(hmacKey, itemAuthorised, set("additionalData", map[string]any{"hmacSignature": "not base64!"}))),
			psp.ErrNotificationForged, "signature_mismatch"},
		{"a signature that is not a string", batch(signed(hmacKey, itemAuthorised, set("additionalData", map[string]any{"hmacSignature": 7}))),
			psp.ErrNotificationForged, "signature_mismatch"},
		{"a forged item is itemRefused before a malformed one is read", batch(signed(hmacKey, with(itemAuthorised, func(i *item) { i.Success = "maybe" })), signed(otherKey, itemAuthorised)),
			psp.ErrNotificationForged, "signature_mismatch"},

		{"not JSON", []byte(`{"live":"false","notificationItems":[`), psp.ErrNotificationMalformed, "body_invalid"},
		{"no items", []byte(`{"live":"false","notificationItems":[]}`), psp.ErrNotificationMalformed, "field_missing"},
		{"not a batch", []byte(`{"live":"false"}`), psp.ErrNotificationMalformed, "field_missing"},
		{"an item that is not wrapped", []byte(`{"live":"false","notificationItems":[{"pspReference":"1"}]}`), psp.ErrNotificationMalformed, "field_missing"},
		{"a success that is not a string", batch(signed(hmacKey, itemAuthorised, set("success", true))), psp.ErrNotificationMalformed, "body_invalid"},
		{"a success that is neither", batch(signed(hmacKey, with(itemAuthorised, func(i *item) { i.Success = "maybe" }))), psp.ErrNotificationMalformed, "type_mismatch"},
		{"an AUTHORISATION without our reference", batch(signed(hmacKey, with(itemAuthorised, func(i *item) { i.MerchantReference = "" }))),
			psp.ErrNotificationMalformed, "field_missing"},
		{"an AUTHORISATION without a currency", batch(signed(hmacKey, with(itemAuthorised, func(i *item) { i.Currency = "" }))),
			psp.ErrNotificationMalformed, "field_missing"},
		{"a REFUND without the payment itemRefunded", batch(signed(hmacKey, with(itemRefunded, func(i *item) { i.OriginalReference = "" }))),
			psp.ErrNotificationMalformed, "field_missing"},
		{"a CAPTURE without its payment", batch(signed(hmacKey, with(itemCaptured, func(i *item) { i.OriginalReference = "" }))),
			psp.ErrNotificationMalformed, "field_missing"},
		{"a CAPTURE_FAILED without our reference", batch(signed(hmacKey, with(itemCaptured, func(i *item) { i.EventCode, i.MerchantReference = "CAPTURE_FAILED", "" }))),
			psp.ErrNotificationMalformed, "field_missing"},
		{"a CANCELLATION's amount removed after signing", batch(signed(hmacKey, itemCancelled, func(o map[string]any) { delete(o, "amount") })),
			psp.ErrNotificationForged, "signature_mismatch"},
		{"a CANCELLATION without a currency", batch(signed(hmacKey, with(itemCancelled, func(i *item) { i.Currency = "" }))),
			psp.ErrNotificationMalformed, "field_missing"},
		{"a CANCELLATION whose success is neither", batch(signed(hmacKey, with(itemCancelled, func(i *item) { i.Success = "" }))),
			psp.ErrNotificationMalformed, "type_mismatch"},
		{"an item without a pspReference", batch(signed(hmacKey, with(itemAuthorised, func(i *item) { i.PSPReference = "" }))),
			psp.ErrNotificationMalformed, "field_missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got, err := ParseNotifications(hmacKey, tc.body)
			require.Nil(t, got)
			require.ErrorIs(t, err, tc.kind)
			var refusal *psp.NotificationError
			require.ErrorAs(t, err, &refusal)
			require.Equal(t, tc.reason, refusal.Reason, "error: %v", err)
			require.NotContains(t, err.Error(), hmacKey)
			require.NotContains(t, err.Error(), sign(hmacKey, itemAuthorised))
		})
	}
}

// An amount that is not a whole number of minor units is malformed, once
// genuine: signed over the text Adyen sent.
func TestParseNotificationsAmountIsWhole(t *testing.T) {
	t.Parallel()

	key, err := hex.DecodeString(hmacKey)
	require.NoError(t, err)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(testPSP + "::" + testMerchant + ":ch_1:10.5:EUR:AUTHORISATION:true"))
	object := signed(hmacKey, itemAuthorised)
	object["amount"] = map[string]any{"currency": "EUR", "value": json.Number("10.5")}
	object["additionalData"] = map[string]any{"hmacSignature": base64.StdEncoding.EncodeToString(mac.Sum(nil))}
	_, err = ParseNotifications(hmacKey, batch(object))
	var refusal *psp.NotificationError
	require.ErrorAs(t, err, &refusal)
	require.Equal(t, psp.ErrNotificationMalformed, refusal.Kind)
	require.Equal(t, "body_invalid", refusal.Reason)
}

func TestParseNotificationsWithoutAKey(t *testing.T) {
	t.Parallel()

	body := batch(signed(hmacKey, itemAuthorised))
	_, err := ParseNotifications("", body)
	require.Equal(t, psp.ErrNoNotificationSecret, err)

	_, err = ParseNotifications("not-hex-secret", body)
	require.ErrorIs(t, err, psp.ErrNoNotificationSecret, "a key that is not hex is the receiver's misconfiguration")
	var refusal *psp.NotificationError
	require.NotErrorAs(t, err, &refusal, "not a refusal of the sender")
	require.NotContains(t, err.Error(), "not-hex-secret")
}

func TestNotificationAccepted(t *testing.T) {
	t.Parallel()
	require.Equal(t, "[accepted]", NotificationAccepted)
}
