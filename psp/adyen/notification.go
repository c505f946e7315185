package adyen

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/chargeflow/chargeflow/psp"
)

// This file is the receiving side of Adyen's standard webhook
// (docs/notifications.md, "Adyen's notifications"): each item's HMAC
// signature verified, and the items read into the evidence a lookup gives
// (psp.Notification).

// NotificationAccepted is the body the receiver answers a batch with once
// it has acted on every item: Adyen takes a delivery as done only when it
// reads it, and sends it again otherwise.
const NotificationAccepted = "[accepted]"

// The event codes acted on; every other one is nothing to do.
const (
	// EventAuthorisation is the outcome of a payment: success "true" is a
	// charge, "false" a decline.
	EventAuthorisation = "AUTHORISATION"

	// EventRefund is the outcome of a refund: success "true" is a refund,
	// "false" a failed refund.
	EventRefund = "REFUND"

	// EventCapture is the outcome of a capture: success "true" is the
	// payment captured, "false" the capture refused.
	EventCapture = "CAPTURE"

	// EventCaptureFailed is a capture the card scheme rejected, which Adyen
	// may send after a CAPTURE that said success "true": the capture
	// failed, whatever its success says.
	EventCaptureFailed = "CAPTURE_FAILED"

	// EventCancellation is the outcome of a cancel: success "true" is the
	// authorisation released, "false" the cancel refused.
	EventCancellation = "CANCELLATION"
)

// The failure and decline codes of a modification that failed at Adyen.
// Adyen's reason for one is free text, which is never put in a code.
const (
	// RefundFailureCode: a REFUND that says success "false".
	RefundFailureCode = "refund_failed"

	// CaptureRefusedCode: a CAPTURE that says success "false": Adyen
	// refused the capture (the payment was not authorised and held any
	// more, or not for as much), and nothing was captured.
	CaptureRefusedCode = "capture_refused"

	// CaptureFailedCode: a CAPTURE_FAILED: the card scheme rejected the
	// capture, and nothing was captured.
	CaptureFailedCode = "capture_failed"

	// CancelRefusedCode: a CANCELLATION that says success "false": Adyen
	// refused the cancel (the payment was captured or released already),
	// and nothing was released by it.
	CancelRefusedCode = "cancel_refused"
)

// refusalReasons maps the refusal reasons Adyen documents for the refusal
// codes of refusalCodes (the text of the notification's reason) to the
// same decline codes; any other reason is "adyen_refusal". Only these
// exact texts are read: the reason is never copied into a code.
var refusalReasons = map[string]string{
	"Refused":            "generic_decline",
	"Expired Card":       "expired_card",
	"Not enough balance": "insufficient_funds",
	"CVC Declined":       "incorrect_cvc",
}

// notificationBody is Adyen's standard webhook: a batch of items, each
// wrapped in an object of its own. Its "live" is not read: an HMAC key
// belongs to one environment, so an item of the other cannot verify.
type notificationBody struct {
	NotificationItems []struct {
		Item *notificationItem `json:"NotificationRequestItem"`
	} `json:"notificationItems"`
}

// notificationItem is a NotificationRequestItem, as much of it as the
// signature covers and the evidence needs. The amount's value is kept as
// its JSON text, which the signature covers as sent.
type notificationItem struct {
	AdditionalData      map[string]json.RawMessage `json:"additionalData"`
	Amount              *notificationAmount        `json:"amount"`
	EventCode           string                     `json:"eventCode"`
	EventDate           string                     `json:"eventDate"`
	MerchantAccountCode string                     `json:"merchantAccountCode"`
	MerchantReference   string                     `json:"merchantReference"`
	OriginalReference   string                     `json:"originalReference"`
	PSPReference        string                     `json:"pspReference"`
	Reason              string                     `json:"reason"`
	Success             string                     `json:"success"`
}

type notificationAmount struct {
	Currency string      `json:"currency"`
	Value    json.Number `json:"value"`
}

// ParseNotifications verifies a batch of Adyen's standard webhook and
// reads each item into a psp.Notification, in order. hmacKeyHex is the
// webhook's HMAC key as the Customer Area shows it (hex); every item's
// additionalData.hmacSignature must be base64(HMAC-SHA256(key,
// "pspReference:originalReference:merchantAccountCode:merchantReference:
// value:currency:eventCode:success")), a missing field an empty string,
// compared in constant time.
//
// The batch is taken or refused whole, so that its acknowledgement
// (NotificationAccepted) never covers an item that was refused: a body
// that is not a batch, or is empty, is psp.ErrNotificationMalformed
// (body_invalid, field_missing); an item without a signature, or whose
// signature does not verify, is psp.ErrNotificationForged
// (signature_missing, signature_mismatch), checked for every item before
// any is read; an item of an event acted on that lacks what its evidence
// needs is malformed (field_missing, type_mismatch). An empty or non-hex
// key is the receiver's misconfiguration, an error that is
// psp.ErrNoNotificationSecret, not a refusal.
//
// Adyen signs no timestamp, so there is no replay window (SignedAt is
// zero): a replayed notification is a genuine one delivered again, and
// applying one is idempotent and only evidence, as a lookup's answer is.
// EventID is pspReference:eventCode:success, since Adyen gives an event no
// id of its own: every delivery of one event carries the same.
func ParseNotifications(hmacKeyHex string, body []byte) ([]psp.Notification, error) {
	if hmacKeyHex == "" {
		return nil, psp.ErrNoNotificationSecret
	}
	key, err := hex.DecodeString(hmacKeyHex)
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("%w: the Adyen HMAC key is not hexadecimal", psp.ErrNoNotificationSecret)
	}

	var batch notificationBody
	if err := json.Unmarshal(body, &batch); err != nil {
		return nil, &psp.NotificationError{Kind: psp.ErrNotificationMalformed, Reason: "body_invalid", Err: err}
	}
	if len(batch.NotificationItems) == 0 {
		return nil, missingField("notificationItems")
	}
	items := make([]*notificationItem, 0, len(batch.NotificationItems))
	for i, wrapper := range batch.NotificationItems {
		if wrapper.Item == nil {
			return nil, missingField(fmt.Sprintf("notificationItems[%d].NotificationRequestItem", i))
		}
		items = append(items, wrapper.Item)
	}
	for i, item := range items {
		if err := verify(key, item); err != nil {
			return nil, atItem(i, err)
		}
	}

	notifications := make([]psp.Notification, 0, len(items))
	for i, item := range items {
		n, err := read(item)
		if err != nil {
			return nil, atItem(i, err)
		}
		notifications = append(notifications, n)
	}
	return notifications, nil
}

// atItem names the item a refusal is about in its Err, keeping it a
// *psp.NotificationError.
func atItem(i int, err *psp.NotificationError) *psp.NotificationError {
	err.Err = fmt.Errorf("notificationItems[%d]: %w", i, err.Err)
	return err
}

// signingString is what an item's HMAC signature covers: its pspReference,
// originalReference, merchantAccountCode, merchantReference, amount value
// and currency, eventCode and success, joined by colons, each missing one
// empty.
func (item *notificationItem) signingString() string {
	var value, currency string
	if item.Amount != nil {
		value, currency = item.Amount.Value.String(), item.Amount.Currency
	}
	return strings.Join([]string{
		item.PSPReference, item.OriginalReference, item.MerchantAccountCode, item.MerchantReference,
		value, currency, item.EventCode, item.Success,
	}, ":")
}

// verify checks item's additionalData.hmacSignature against key, in
// constant time. The refusal never quotes the key or a signature.
func verify(key []byte, item *notificationItem) *psp.NotificationError {
	var signature string
	if raw, ok := item.AdditionalData["hmacSignature"]; ok {
		if err := json.Unmarshal(raw, &signature); err != nil {
			return &psp.NotificationError{Kind: psp.ErrNotificationForged, Reason: "signature_mismatch",
				Err: errors.New("additionalData.hmacSignature is not a string")}
		}
	}
	if signature == "" {
		return &psp.NotificationError{Kind: psp.ErrNotificationForged, Reason: "signature_missing",
			Err: errors.New("no additionalData.hmacSignature")}
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(item.signingString()))
	given, err := base64.StdEncoding.DecodeString(signature)
	if err != nil || !hmac.Equal(mac.Sum(nil), given) {
		return &psp.NotificationError{Kind: psp.ErrNotificationForged, Reason: "signature_mismatch",
			Err: errors.New("the signature does not verify with the HMAC key over this item")}
	}
	return nil
}

// read reads a verified item: an AUTHORISATION as a charge's answer, a
// REFUND as a refund's, a CAPTURE or CAPTURE_FAILED as a capture's, a
// CANCELLATION as a cancel's, anything else as nothing to do.
func read(item *notificationItem) (psp.Notification, *psp.NotificationError) {
	switch {
	case item.PSPReference == "":
		return psp.Notification{}, missingField("pspReference")
	case item.EventCode == "":
		return psp.Notification{}, missingField("eventCode")
	}
	n := psp.Notification{
		EventID:    item.PSPReference + ":" + item.EventCode + ":" + item.Success,
		EventType:  item.EventCode,
		Reference:  item.MerchantReference,
		ProviderID: item.PSPReference,
	}
	if created, err := time.Parse(time.RFC3339, item.EventDate); err == nil {
		n.Created = created
	}
	switch item.EventCode {
	case EventAuthorisation, EventRefund, EventCapture, EventCaptureFailed, EventCancellation:
	default:
		n.Kind, n.Reason = psp.NotificationIgnored, "unhandled_type"
		return n, nil
	}

	var succeeded bool
	switch item.Success {
	case "true":
		succeeded = true
	case "false":
	default:
		return psp.Notification{}, &psp.NotificationError{Kind: psp.ErrNotificationMalformed, Reason: "type_mismatch",
			Err: errors.New(`success is neither "true" nor "false"`)}
	}
	money, currency, err := moneyOf(item)
	if err != nil {
		return psp.Notification{}, err
	}
	if item.MerchantReference == "" {
		return psp.Notification{}, missingField("merchantReference")
	}

	if item.EventCode == EventAuthorisation {
		// Whether the payment was captured with its authorisation is the
		// request's, which the item does not tell: Authorization says so.
		n.Kind, n.Authorization = psp.NotificationCharge, true
		n.Charge = psp.Charge{ID: item.PSPReference, Status: psp.StatusSucceeded, Amount: money, Currency: currency, Reference: item.MerchantReference}
		if !succeeded {
			n.Charge.Status, n.Charge.DeclineCode = psp.StatusFailed, refusalOf(item.Reason)
		}
		return n, nil
	}
	// A modification's item names its payment in originalReference.
	if item.OriginalReference == "" {
		return psp.Notification{}, missingField("originalReference")
	}
	switch item.EventCode {
	case EventRefund:
		n.Kind = psp.NotificationRefund
		n.Refund = psp.Refund{ID: item.PSPReference, Status: psp.StatusSucceeded, Charge: item.OriginalReference,
			Amount: money, Currency: currency, Reference: item.MerchantReference}
		if !succeeded {
			n.Refund.Status, n.Refund.FailureCode = psp.StatusFailed, RefundFailureCode
		}
	case EventCapture, EventCaptureFailed:
		// The item is the capture's, its amount what was to be captured:
		// the payment's own amount and our charge's reference are not in
		// it.
		n.Kind = psp.NotificationCapture
		n.Charge = psp.Charge{ID: item.OriginalReference, Status: psp.StatusSucceeded, Currency: currency, AmountCaptured: money}
		switch {
		case item.EventCode == EventCaptureFailed:
			n.Charge = refusedModification(item, money, currency, CaptureFailedCode)
		case !succeeded:
			n.Charge = refusedModification(item, money, currency, CaptureRefusedCode)
		}
	case EventCancellation:
		// A cancel's amount is the payment's, which it released whole.
		n.Kind = psp.NotificationCancel
		n.Charge = psp.Charge{ID: item.OriginalReference, Status: psp.StatusCanceled, Amount: money, Currency: currency}
		if !succeeded {
			n.Charge = refusedModification(item, money, currency, CancelRefusedCode)
		}
	}
	return n, nil
}

// refusedModification is the answer of a capture or cancel that failed
// at Adyen with code: the payment as it was, with the amount the item
// names, as psp.OperationRequest.Refused makes one.
func refusedModification(item *notificationItem, money int64, currency, code string) psp.Charge {
	return psp.Charge{ID: item.OriginalReference, Status: psp.StatusFailed, Amount: money, Currency: currency, DeclineCode: code}
}

// moneyOf is an item's amount, which the evidence compares with the row's:
// a whole number of minor units and a currency.
func moneyOf(item *notificationItem) (int64, string, *psp.NotificationError) {
	switch {
	case item.Amount == nil || item.Amount.Value == "":
		return 0, "", missingField("amount.value")
	case item.Amount.Currency == "":
		return 0, "", missingField("amount.currency")
	}
	value, err := strconv.ParseInt(item.Amount.Value.String(), 10, 64)
	if err != nil {
		return 0, "", &psp.NotificationError{Kind: psp.ErrNotificationMalformed, Reason: "body_invalid",
			Err: errors.New("amount.value is not a whole number of minor units")}
	}
	return value, item.Amount.Currency, nil
}

// refusalOf is the decline code of a refused payment's notification: the
// shared code for a refusal reason Adyen documents (refusalReasons), else
// "adyen_refusal". Never the reason's text.
func refusalOf(reason string) string {
	if code, ok := refusalReasons[reason]; ok {
		return code
	}
	return "adyen_refusal"
}

// missingField is the refusal of an item or a batch without field.
func missingField(field string) *psp.NotificationError {
	return &psp.NotificationError{Kind: psp.ErrNotificationMalformed, Reason: "field_missing", Err: errors.New(field + " is missing")}
}
