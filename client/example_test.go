package client_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/chargeflow/chargeflow/client"
)

// order is what a merchant stores about an order; the idempotency keys of
// its charge and its refund are made once and stored with it.
type order struct {
	ID        string
	ChargeKey string
	ChargeID  string
}

// A merchant charges an order exactly once, whatever fails on the way, and
// waits for the outcome. It needs a running chargeflow, so it has no output
// to check.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New("http://127.0.0.1:8080", os.Getenv("CHARGEFLOW_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}

	// The key is made when the order is, and stored with it before the
	// first call: after a crash, the order's next attempt carries it, and
	// gets the charge already made instead of a second one.
	o := order{ID: "A-1", ChargeKey: client.NewIdempotencyKey()}
	// save(o)

	charge, err := c.CreateCharge(ctx, client.ChargeParams{
		Amount: 1000, Currency: "USD", PaymentMethod: "pm_card_visa",
		Description:    "Order A-1",
		Metadata:       map[string]string{"order": o.ID},
		IdempotencyKey: o.ChargeKey,
	})
	var apiErr *client.Error
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown):
		// No definitive answer: perhaps charged. Try again later with
		// o.ChargeKey, never with a new key.
		log.Printf("order %s: try again later: %v", o.ID, err)
		return
	case errors.As(err, &apiErr):
		// Refused, and nothing stored: the request must change.
		log.Printf("order %s: refused: %s (field %q)", o.ID, apiErr.Code, apiErr.Field)
		return
	case err != nil:
		log.Fatal(err)
	}
	o.ChargeID = charge.ID // save(o)

	charge, err = c.WaitForOutcome(ctx, charge.ID)
	if err != nil {
		log.Fatal(err)
	}
	switch charge.Status {
	case client.StatusSucceeded:
		fmt.Println("paid:", charge.ProviderChargeID)
	case client.StatusFailed:
		fmt.Println("declined:", charge.FailureCode)
	case client.StatusNeedsReview:
		fmt.Println("an operator decides; a webhook will tell")
	}

	// A refund of part of it, with a key of its own, made and stored once
	// like the charge's.
	_, err = c.CreateRefund(ctx, client.RefundParams{
		Charge: charge.ID, Amount: 400, Reason: client.RefundReasonRequestedByCustomer,
		IdempotencyKey: client.NewIdempotencyKey(),
	})
	if errors.Is(err, client.CodeRefundExceedsCharge) {
		fmt.Println("already refunded")
	}
}

// A merchant that ships goods authorizes at checkout and captures what it
// ships, or releases the hold when the order is canceled. The capture's key,
// like the charge's, is made once and stored with the order. It needs a
// running chargeflow, so it has no output to check.
func ExampleClient_CaptureCharge() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New("http://127.0.0.1:8080", os.Getenv("CHARGEFLOW_API_KEY"))
	if err != nil {
		log.Fatal(err)
	}

	// At checkout: authorized only, the money held.
	charge, err := c.CreateCharge(ctx, client.ChargeParams{
		Amount: 1000, Currency: "USD", PaymentMethod: "pm_card_visa",
		CaptureLater: true, IdempotencyKey: client.NewIdempotencyKey(), // stored with the order
	})
	if err != nil {
		log.Fatal(err)
	}
	if charge, err = c.WaitForOutcome(ctx, charge.ID); err != nil {
		log.Fatal(err)
	}
	if charge.Status != client.StatusRequiresCapture {
		log.Printf("%s was not authorized: %s %s", charge.ID, charge.Status, charge.FailureCode)
		return
	}

	// When 6.00 of the 10.00 ships: capture that, and the rest is released.
	// (CancelCharge releases all of it instead.)
	capture, err := c.CaptureCharge(ctx, charge.ID, client.CaptureParams{
		Amount: 600, IdempotencyKey: client.NewIdempotencyKey(), // stored with the shipment
	})
	switch {
	case errors.Is(err, client.CodeChargeNotCapturable):
		log.Printf("%s is no longer held: captured, released or expired", charge.ID)
		return
	case err != nil:
		log.Fatal(err)
	}
	if capture, err = c.WaitForCapture(ctx, capture.ID); err != nil {
		log.Fatal(err)
	}
	fmt.Println(capture.Status) // succeeded: the charge is succeeded, AmountCaptured 600
}

// A webhook endpoint verifies each delivery before it reads it. Here a
// delivery is signed as chargeflow signs one, and sent to the handler.
func ExampleVerifyWebhook() {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("an endpoint's signing key"))

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "unreadable", http.StatusBadRequest)
			return
		}
		if err := client.VerifyWebhook(secret, r.Header, body, 5*time.Minute); err != nil {
			http.Error(w, "invalid signature", http.StatusBadRequest)
			return
		}
		var event client.Event
		if err := json.Unmarshal(body, &event); err != nil {
			http.Error(w, "not an event", http.StatusBadRequest)
			return
		}
		// Act on event.ID once: the same event may be delivered again.
		fmt.Println("verified", event.Type, event.ID)
		w.WriteHeader(http.StatusNoContent)
	})

	body := `{"id":"evt_01jqzv7y9c8m4k2w6x0n3r5t7a","type":"charge.succeeded","created_at":"2026-01-01T00:00:00Z","data":{}}`
	send := func(signature string) int {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/chargeflow", strings.NewReader(body))
		timestamp := strconv.FormatInt(time.Now().Unix(), 10)
		req.Header.Set("webhook-id", "evt_01jqzv7y9c8m4k2w6x0n3r5t7a")
		req.Header.Set("webhook-timestamp", timestamp)
		if signature == "" {
			signature = signAsChargeflow(secret, "evt_01jqzv7y9c8m4k2w6x0n3r5t7a", timestamp, body)
		}
		req.Header.Set("webhook-signature", signature)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, req)
		return w.Code
	}
	fmt.Println(send(""))
	fmt.Println(send("v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="))
	// Output:
	// verified charge.succeeded evt_01jqzv7y9c8m4k2w6x0n3r5t7a
	// 204
	// 400
}

// signAsChargeflow is what the sender does: HMAC-SHA256 keyed with the
// secret's bytes over "id.timestamp.body".
func signAsChargeflow(secret, id, timestamp, body string) string {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// errors.Is with a Code tests an answer's problem code through any
// wrapping; errors.As reads the rest of it.
func ExampleCode() {
	// What CreateRefund returns when the charge's refunds would pass its
	// amount (the API's 409 refund_exceeds_charge).
	var err error = &client.Error{Status: 409, Code: client.CodeRefundExceedsCharge, Detail: "400 of 1000 is left to refund"}
	err = fmt.Errorf("refund order A-1: %w", err)

	fmt.Println(errors.Is(err, client.CodeRefundExceedsCharge))
	fmt.Println(errors.Is(err, client.CodeChargeNotRefundable))
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Detail)
	}
	// Output:
	// true
	// false
	// 409 400 of 1000 is left to refund
}
