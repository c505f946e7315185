package fakepsp

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/chargeflow/chargeflow/psp"
)

// This file is the Adyen protocol's notifications: Adyen's standard
// webhook, one NotificationRequestItem a POST, signed inside the item with
// Adyen's HMAC (docs/notifications.md, "Adyen's notifications"). The
// queue, the retries and the faults are the shared ones (notify.go).

// The event codes the fake sends, Adyen's.
const (
	adyenEventAuthorisation = "AUTHORISATION"
	adyenEventRefund        = "REFUND"
	adyenEventCapture       = "CAPTURE"
	adyenEventCaptureFailed = "CAPTURE_FAILED"
	adyenEventCancellation  = "CANCELLATION"
)

// adyenAcknowledgement is what a receiver answers to take a notification.
const adyenAcknowledgement = "[accepted]"

// The reasons a REFUND notification gives for a refund refused, by the
// ledger's failure code.
var adyenRefundRefusals = map[string]string{
	refundExceedsCharge: "Refund amount exceeds what is left of the payment",
	chargeNotRefundable: "Payment was not authorised",
}

// The reasons a CAPTURE or CAPTURE_FAILED and a CANCELLATION notification
// give for a capture or a cancel refused, by the ledger's failure code. A
// capture after the hold expired is the card scheme's rejection, as Adyen
// documents an expired capture: CAPTURE_FAILED.
var (
	adyenCaptureRefusals = map[string]string{
		chargeNotCapturable:         "Payment is not authorised for capture",
		captureExceedsAuthorization: "Insufficient balance on payment",
		holdExpired:                 "Capture rejected by card scheme (capture expired)",
	}
	adyenCancelRefusals = map[string]string{
		chargeNotCapturable: "Payment is not authorised for cancellation",
		holdExpired:         "Authorisation expired",
	}
)

// adyenWebhook is Adyen's standard webhook body.
type adyenWebhook struct {
	Live              string                  `json:"live"`
	NotificationItems []adyenNotificationItem `json:"notificationItems"`
}

type adyenNotificationItem struct {
	NotificationRequestItem adyenNotificationRequestItem `json:"NotificationRequestItem"`
}

// adyenNotificationRequestItem is one notification, with the fields the
// fake has values for.
type adyenNotificationRequestItem struct {
	AdditionalData      map[string]string `json:"additionalData"`
	Amount              adyenAmount       `json:"amount"`
	EventCode           string            `json:"eventCode"`
	EventDate           string            `json:"eventDate"`
	MerchantAccountCode string            `json:"merchantAccountCode"`
	MerchantReference   string            `json:"merchantReference"`
	OriginalReference   string            `json:"originalReference,omitempty"`
	PSPReference        string            `json:"pspReference"`
	Reason              string            `json:"reason,omitempty"`
	Success             string            `json:"success"`
}

// signedData is what Adyen's HMAC of a notification item covers: eight
// fields joined by colons, an absent one empty.
func (item adyenNotificationRequestItem) signedData() []byte {
	return []byte(strings.Join([]string{
		item.PSPReference, item.OriginalReference, item.MerchantAccountCode, item.MerchantReference,
		strconv.FormatInt(item.Amount.Value, 10), item.Amount.Currency, item.EventCode, item.Success,
	}, ":"))
}

// adyenNotification words a notification as Adyen's standard webhook: an
// AUTHORISATION of every payment (success "true" when authorised, for a
// manual capture too, "false" with the refusal reason when refused), a
// REFUND of every refund decided, a CAPTURE of every capture and a
// CANCELLATION of every cancel decided (success "true" when applied,
// "false" with the reason when refused; a capture refused because the
// hold expired is a CAPTURE_FAILED). A modification names its payment in
// originalReference. The item carries its own signature, made with sign.
func adyenNotification(c *record, _ string, _ time.Time, sign func(data []byte) string) (event, bool, error) {
	item := adyenNotificationRequestItem{
		Amount:              adyenAmount{Currency: c.Currency, Value: c.Amount},
		EventDate:           c.CreatedAt.Format(time.RFC3339),
		MerchantAccountCode: c.MerchantAccount,
		MerchantReference:   c.Reference,
		PSPReference:        c.ID,
		Success:             "true",
	}
	switch {
	case c.isCharge():
		item.EventCode = adyenEventAuthorisation
		if c.Status == psp.StatusFailed {
			item.Success = "false"
			_, item.Reason = adyenRefusal(c.DeclineCode)
		}
	case c.isRefund():
		item.EventCode, item.OriginalReference = adyenEventRefund, c.Charge
	case c.Kind == kindCapture:
		item.EventCode, item.OriginalReference = adyenEventCapture, c.Charge
	case c.Kind == kindCancel:
		item.EventCode, item.OriginalReference = adyenEventCancellation, c.Charge
	case c.FailureCode == "":
		return event{}, false, nil
	case c.Refused == kindCapture && c.FailureCode == holdExpired:
		// Adyen's CAPTURE_FAILED says success "true": the failure is the
		// event.
		item.EventCode, item.OriginalReference = adyenEventCaptureFailed, c.Charge
		item.Reason = adyenCaptureRefusals[c.FailureCode]
	case c.Refused == kindCapture:
		item.EventCode, item.OriginalReference, item.Success = adyenEventCapture, c.Charge, "false"
		item.Reason = adyenCaptureRefusals[c.FailureCode]
	case c.Refused == kindCancel:
		item.EventCode, item.OriginalReference, item.Success = adyenEventCancellation, c.Charge, "false"
		item.Reason = adyenCancelRefusals[c.FailureCode]
	default:
		item.EventCode, item.OriginalReference, item.Success = adyenEventRefund, c.Charge, "false"
		item.Reason = adyenRefundRefusals[c.FailureCode]
	}
	item.AdditionalData = map[string]string{"hmacSignature": sign(item.signedData())}
	body, err := json.Marshal(adyenWebhook{Live: "false", NotificationItems: []adyenNotificationItem{{NotificationRequestItem: item}}})
	return event{typ: item.EventCode, body: body}, true, err
}

// adyenHMAC is Adyen's signature of a notification item: HMAC-SHA256 of
// data with the hex-decoded key, in base64. The key was checked at start
// (isHexKey), and a forgery's is hex too.
func adyenHMAC(keyHex string, data []byte) string {
	key, err := hex.DecodeString(keyHex)
	if err != nil {
		return ""
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(data)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// isHexKey reports whether key is a non-empty hex string, as Adyen gives
// its HMAC keys.
func isHexKey(key string) bool {
	_, err := hex.DecodeString(key)
	return key != "" && err == nil
}

// adyenAccepted is Adyen's acceptance of a notification: the receiver
// answers a 2xx with "[accepted]"; anything else is retried.
func adyenAccepted(status int, body []byte) bool {
	return accepted2xx(status, body) && string(bytes.TrimSpace(body)) == adyenAcknowledgement
}
