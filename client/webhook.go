package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultWebhookTolerance is how far a webhook's timestamp may be from now
// when VerifyWebhook is given no tolerance: the Standard Webhooks
// libraries' five minutes.
const DefaultWebhookTolerance = 5 * time.Minute

// The errors of VerifyWebhook. Answer any of them with a 4xx (400 or 401)
// and do not act on the body.
var (
	// ErrWebhookSecret: the secret is not "whsec_" and base64.
	ErrWebhookSecret = errors.New("chargeflow: the webhook secret is not whsec_ followed by base64")
	// ErrWebhookHeaders: webhook-id, webhook-timestamp or webhook-signature
	// is missing, or the timestamp is not a number.
	ErrWebhookHeaders = errors.New("chargeflow: webhook-id, webhook-timestamp or webhook-signature missing or malformed")
	// ErrWebhookSignature: no v1 signature matches: the body or the
	// headers were changed, or it was not signed with this secret.
	ErrWebhookSignature = errors.New("chargeflow: no webhook signature matches")
	// ErrWebhookTimestamp: the signature matches but the timestamp is
	// outside the tolerance: a replay of an old delivery, or a clock far
	// off.
	ErrWebhookTimestamp = errors.New("chargeflow: webhook timestamp outside the tolerance")
)

// The Standard Webhooks headers.
const (
	headerWebhookID        = "webhook-id"
	headerWebhookTimestamp = "webhook-timestamp"
	headerWebhookSignature = "webhook-signature"
)

// VerifyWebhook checks that a webhook delivery was signed by chargeflow with
// secret (the endpoint's signing secret, "whsec_…") and is recent. It
// implements the Standard Webhooks scheme (https://www.standardwebhooks.com):
// the signature is HMAC-SHA256, keyed with the bytes the secret's base64
// encodes, over "<webhook-id>.<webhook-timestamp>.<body>"; the
// webhook-signature header lists one or more "v1,<base64 signature>"
// separated by spaces (a sender rotating its secret signs with the old and
// the new), and any one that matches is enough. Signatures are compared in
// constant time. A timestamp (Unix seconds) more than tolerance away from
// now, either way, is refused; a tolerance of zero or less means
// DefaultWebhookTolerance.
//
// body must be the request's body exactly as received: read it whole, verify
// it, and only then parse it as JSON. The webhook-id is the event's id and
// the same on every delivery of the event; use it to act on each event once.
func VerifyWebhook(secret string, headers http.Header, body []byte, tolerance time.Duration) error {
	return verifyWebhook(secret, headers, body, tolerance, time.Now())
}

func verifyWebhook(secret string, headers http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return ErrWebhookSecret
	}
	id, timestamp := header(headers, headerWebhookID), header(headers, headerWebhookTimestamp)
	signatures := strings.Fields(strings.Join(headerValues(headers, headerWebhookSignature), " "))
	seconds, err := strconv.ParseInt(timestamp, 10, 64)
	if id == "" || err != nil || len(signatures) == 0 {
		return ErrWebhookHeaders
	}

	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	matched := false
	for _, signature := range signatures {
		version, encoded, _ := strings.Cut(signature, ",")
		if version != "v1" {
			continue // another scheme (v1a is asymmetric): not ours to check
		}
		got, err := base64.StdEncoding.DecodeString(encoded)
		if err == nil && hmac.Equal(got, want) {
			matched = true
		}
	}
	if !matched {
		return ErrWebhookSignature
	}
	// Checked after the signature, so that this error is only ever about an
	// authentic delivery: an old one replayed, or a clock that is off.
	if tolerance <= 0 {
		tolerance = DefaultWebhookTolerance
	}
	if age := now.Sub(time.Unix(seconds, 0)); age > tolerance || age < -tolerance {
		return ErrWebhookTimestamp
	}
	return nil
}

// headerValues reads a header from a request's headers (canonical names)
// or from a map written by hand with the lower-case names.
func headerValues(headers http.Header, name string) []string {
	if values := headers.Values(name); len(values) > 0 {
		return values
	}
	return headers[name]
}

func header(headers http.Header, name string) string {
	if values := headerValues(headers, name); len(values) > 0 {
		return values[0]
	}
	return ""
}

// Event is what a webhook delivery's body holds, and what GET /v1/events
// lists: something that happened to a charge or a refund. Its ID is the
// delivery's webhook-id.
type Event struct {
	ID string `json:"id"`
	// Type is charge.succeeded, charge.failed, charge.needs_review,
	// charge.authorized, charge.captured, charge.canceled,
	// refund.succeeded, refund.failed, refund.needs_review,
	// capture.failed, capture.needs_review, cancel.failed,
	// cancel.needs_review or webhook_endpoint.disabled.
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	// Data is the charge or the refund (by Type's prefix) as the move left
	// it: decode it into a Charge or a Refund. For
	// webhook_endpoint.disabled it is the endpoint (its id, url, events,
	// status "disabled" and disabled_reason; never its secret) that was
	// disabled after a delivery to it failed every attempt.
	Data json.RawMessage `json:"data"`
}

// ErrWebhookPayload: the signature matched, but the body is not an event,
// or its id is not the delivery's webhook-id. A sender that signs such a
// body is not chargeflow: answer 400 and do not act on it.
var ErrWebhookPayload = errors.New("chargeflow: the signed body is not an event with the delivery's webhook-id")

// ConstructEvent verifies a webhook delivery as VerifyWebhook does and, only
// when it is authentic and recent, parses its body into an Event whose ID
// is the delivery's webhook-id. It is the one call a merchant's webhook
// handler needs before acting:
//
//	event, err := client.ConstructEvent(secret, r.Header, body, 0)
//	if err != nil { /* 400, and do not act */ }
//	switch event.Type { case "charge.succeeded": charge, err := event.Charge() … }
//
// Act on each event once: event.ID is the same on every delivery of it.
func ConstructEvent(secret string, headers http.Header, body []byte, tolerance time.Duration) (*Event, error) {
	return constructEvent(secret, headers, body, tolerance, time.Now())
}

func constructEvent(secret string, headers http.Header, body []byte, tolerance time.Duration, now time.Time) (*Event, error) {
	if err := verifyWebhook(secret, headers, body, tolerance, now); err != nil {
		return nil, err
	}
	var event Event
	if err := json.Unmarshal(body, &event); err != nil || event.Type == "" || len(event.Data) == 0 ||
		event.ID != header(headers, headerWebhookID) {
		return nil, ErrWebhookPayload
	}
	return &event, nil
}

// Charge decodes the event's data as the charge it is about; an event whose
// type is not a charge.* is an error.
func (e *Event) Charge() (*Charge, error) {
	var charge Charge
	if err := e.decode("charge.", &charge); err != nil {
		return nil, err
	}
	return &charge, nil
}

// Refund decodes the event's data as the refund it is about; an event whose
// type is not a refund.* is an error.
func (e *Event) Refund() (*Refund, error) {
	var refund Refund
	if err := e.decode("refund.", &refund); err != nil {
		return nil, err
	}
	return &refund, nil
}

func (e *Event) decode(prefix string, out any) error {
	if !strings.HasPrefix(e.Type, prefix) {
		return fmt.Errorf("chargeflow: event %s is %s, not %s*", e.ID, e.Type, prefix)
	}
	if err := json.Unmarshal(e.Data, out); err != nil {
		return fmt.Errorf("chargeflow: event %s: %w", e.ID, err)
	}
	return nil
}
