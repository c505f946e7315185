package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The test vector the Standard Webhooks libraries share (their "sign"
// tests, in every language of github.com/standard-webhooks/standard-webhooks).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func vectorHeaders(signature string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", vectorID)
	h.Set("webhook-timestamp", strconv.Itoa(vectorTimestamp))
	h.Set("webhook-signature", signature)
	return h
}

var vectorTime = time.Unix(vectorTimestamp, 0)

// sign signs as a sender does, for the cases the vector does not cover.
func sign(t *testing.T, secret, id string, timestamp int64, body string) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func TestVerifyWebhookStandardVector(t *testing.T) {
	t.Parallel()
	if err := verifyWebhook(vectorSecret, vectorHeaders(vectorSignature), []byte(vectorBody), time.Minute, vectorTime); err != nil {
		t.Fatalf("the Standard Webhooks vector: %v", err)
	}
	// The test helper agrees with the vector, so the cases below sign right.
	if got := sign(t, vectorSecret, vectorID, vectorTimestamp, vectorBody); got != vectorSignature {
		t.Fatalf("sign = %s, want %s", got, vectorSignature)
	}
	// The Standard Webhooks libraries take the secret without its prefix too.
	if err := verifyWebhook(vectorSecret[len("whsec_"):], vectorHeaders(vectorSignature), []byte(vectorBody), time.Minute, vectorTime); err != nil {
		t.Fatalf("without whsec_: %v", err)
	}
}

func TestVerifyWebhookRefusals(t *testing.T) {
	t.Parallel()
	otherSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another endpoint's 24 b."))
	wrongKey := sign(t, otherSecret, vectorID, vectorTimestamp, vectorBody)

	cases := []struct {
		name    string
		secret  string
		headers http.Header
		body    string
		now     time.Time
		want    error
	}{
		{"BodyChanged", vectorSecret, vectorHeaders(vectorSignature), `{"test": 2432232315}`, vectorTime, ErrWebhookSignature},
		{"BodyReformatted", vectorSecret, vectorHeaders(vectorSignature), `{"test":2432232314}`, vectorTime, ErrWebhookSignature},
		{"IDChanged", vectorSecret, func() http.Header {
			h := vectorHeaders(vectorSignature)
			h.Set("webhook-id", "msg_other")
			return h
		}(), vectorBody, vectorTime, ErrWebhookSignature},
		{"TimestampChanged", vectorSecret, func() http.Header {
			h := vectorHeaders(vectorSignature)
			h.Set("webhook-timestamp", strconv.Itoa(vectorTimestamp+1))
			return h
		}(), vectorBody, vectorTime, ErrWebhookSignature},
		{"AnotherSecret", otherSecret, vectorHeaders(vectorSignature), vectorBody, vectorTime, ErrWebhookSignature},
		{"SignedWithAnotherSecret", vectorSecret, vectorHeaders(wrongKey), vectorBody, vectorTime, ErrWebhookSignature},
		{"OnlyAnotherVersion", vectorSecret, vectorHeaders("v2" + vectorSignature[2:]), vectorBody, vectorTime, ErrWebhookSignature},
		{"EmptySignature", vectorSecret, vectorHeaders("v1,"), vectorBody, vectorTime, ErrWebhookSignature},
		{"NotBase64", vectorSecret, vectorHeaders("v1,not-base64!"), vectorBody, vectorTime, ErrWebhookSignature},
		{"TooOld", vectorSecret, vectorHeaders(vectorSignature), vectorBody, vectorTime.Add(5*time.Minute + time.Second), ErrWebhookTimestamp},
		{"TooNew", vectorSecret, vectorHeaders(vectorSignature), vectorBody, vectorTime.Add(-5*time.Minute - time.Second), ErrWebhookTimestamp},
		{"NoID", vectorSecret, func() http.Header {
			h := vectorHeaders(vectorSignature)
			h.Del("webhook-id")
			return h
		}(), vectorBody, vectorTime, ErrWebhookHeaders},
		{"NoTimestamp", vectorSecret, func() http.Header {
			h := vectorHeaders(vectorSignature)
			h.Del("webhook-timestamp")
			return h
		}(), vectorBody, vectorTime, ErrWebhookHeaders},
		{"TimestampNotANumber", vectorSecret, func() http.Header {
			h := vectorHeaders(vectorSignature)
			h.Set("webhook-timestamp", "2021-02-25T15:02:10Z")
			return h
		}(), vectorBody, vectorTime, ErrWebhookHeaders},
		{"NoSignature", vectorSecret, vectorHeaders(" "), vectorBody, vectorTime, ErrWebhookHeaders},
		{"SecretNotBase64", "whsec_***", vectorHeaders(vectorSignature), vectorBody, vectorTime, ErrWebhookSecret},
		{"NoSecret", "", vectorHeaders(vectorSignature), vectorBody, vectorTime, ErrWebhookSecret},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Tolerance zero is the default, five minutes.
			err := verifyWebhook(tc.secret, tc.headers, []byte(tc.body), 0, tc.now)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestVerifyWebhookAccepts(t *testing.T) {
	t.Parallel()
	otherSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("the secret being retired"))
	old := sign(t, otherSecret, vectorID, vectorTimestamp, vectorBody)

	cases := []struct {
		name      string
		headers   http.Header
		now       time.Time
		tolerance time.Duration
	}{
		// During a rotation a delivery carries a signature per secret; one
		// matching is enough, in any position, and other schemes are skipped.
		{"RotationNewSecondOldFirst", vectorHeaders(old + " " + vectorSignature), vectorTime, 0},
		{"RotationAmongOthers", vectorHeaders("v1a,c2lnbmVk " + vectorSignature + " " + old), vectorTime, 0},
		{"SignatureHeaderRepeated", func() http.Header {
			h := vectorHeaders(old)
			h.Add("webhook-signature", vectorSignature)
			return h
		}(), vectorTime, 0},
		{"LowerCaseMapWrittenByHand", http.Header{
			"webhook-id":        {vectorID},
			"webhook-timestamp": {strconv.Itoa(vectorTimestamp)},
			"webhook-signature": {vectorSignature},
		}, vectorTime, 0},
		{"AtTheToleranceInThePast", vectorHeaders(vectorSignature), vectorTime.Add(time.Minute), time.Minute},
		{"AtTheToleranceInTheFuture", vectorHeaders(vectorSignature), vectorTime.Add(-time.Minute), time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := verifyWebhook(vectorSecret, tc.headers, []byte(vectorBody), tc.tolerance, tc.now); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// VerifyWebhook reads the real clock: the vector, signed in 2021, is too old.
func TestVerifyWebhookUsesTheClock(t *testing.T) {
	t.Parallel()
	err := VerifyWebhook(vectorSecret, vectorHeaders(vectorSignature), []byte(vectorBody), time.Hour)
	if !errors.Is(err, ErrWebhookTimestamp) {
		t.Fatalf("got %v, want ErrWebhookTimestamp", err)
	}
	now := time.Now().Unix()
	h := vectorHeaders(sign(t, vectorSecret, vectorID, now, vectorBody))
	h.Set("webhook-timestamp", strconv.FormatInt(now, 10))
	if err := VerifyWebhook(vectorSecret, h, []byte(vectorBody), 0); err != nil {
		t.Fatal(err)
	}
}

// ConstructEvent parses only what verifies, and only an event whose id is
// the delivery's webhook-id: a body signed by the holder of the secret but
// not shaped as chargeflow's event is refused, not half-parsed.
func TestConstructEvent(t *testing.T) {
	t.Parallel()
	const eventID = "evt_01JDQ4X2V9A8E6T5N3K2M1P0QR"
	charge := `{"id":"ch_01JDQ4X2V9A8E6T5N3K2M1P0QS","amount":1000,"currency":"USD","status":"succeeded"}`
	deliver := func(id, body string) http.Header {
		h := vectorHeaders(sign(t, vectorSecret, id, vectorTimestamp, body))
		h.Set("webhook-id", id)
		return h
	}

	body := `{"id":"` + eventID + `","type":"charge.succeeded","created_at":"2021-02-25T15:02:10Z","data":` + charge + `}`
	event, err := constructEvent(vectorSecret, deliver(eventID, body), []byte(body), time.Minute, vectorTime)
	if err != nil {
		t.Fatal(err)
	}
	if event.ID != eventID || event.Type != "charge.succeeded" {
		t.Fatalf("event = %+v", event)
	}
	got, err := event.Charge()
	if err != nil || got.ID != "ch_01JDQ4X2V9A8E6T5N3K2M1P0QS" || got.Amount != 1000 || got.Status != StatusSucceeded {
		t.Fatalf("Charge() = %+v, %v", got, err)
	}
	if _, err := event.Refund(); err == nil {
		t.Fatal("a charge event decoded as a refund")
	}

	refused := []struct {
		name    string
		headers http.Header
		body    string
		want    error
	}{
		{"Tampered", deliver(eventID, body), body + " ", ErrWebhookSignature},
		{"TooOld", deliver(eventID, body), "", ErrWebhookTimestamp},
		{"NotJSON", deliver(eventID, "charge.succeeded"), "charge.succeeded", ErrWebhookPayload},
		{"NoType", deliver(eventID, `{"id":"`+eventID+`","data":{}}`), `{"id":"` + eventID + `","data":{}}`, ErrWebhookPayload},
		{"NoData", deliver(eventID, `{"id":"`+eventID+`","type":"charge.failed"}`), `{"id":"` + eventID + `","type":"charge.failed"}`, ErrWebhookPayload},
		{"IDIsNotTheWebhookID", deliver("evt_other", body), body, ErrWebhookPayload},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			payload, now := tc.body, vectorTime
			if tc.name == "TooOld" {
				payload, now = body, vectorTime.Add(time.Hour)
			}
			event, err := constructEvent(vectorSecret, tc.headers, []byte(payload), time.Minute, now)
			if !errors.Is(err, tc.want) || event != nil {
				t.Fatalf("got %+v, %v; want %v", event, err, tc.want)
			}
		})
	}
}

// A capture's or a cancel's event decodes as the operation, by its type's
// prefix; a charge's does not, and an operation's is no charge.
func TestEventOperation(t *testing.T) {
	t.Parallel()
	for typ, object := range map[string]string{"capture.failed": "capture", "cancel.needs_review": "cancel"} {
		data := `{"id":"cp_1","object":"` + object + `","charge":"ch_1","amount":600,"currency":"USD","status":"failed","failure_code":"hold_expired"}`
		event := &Event{ID: "evt_1", Type: typ, Data: []byte(data)}
		op, err := event.Operation()
		if err != nil || op.Object != object || op.Charge != "ch_1" || op.Amount != 600 || op.FailureCode != "hold_expired" {
			t.Fatalf("%s: Operation() = %+v, %v", typ, op, err)
		}
		if _, err := event.Charge(); err == nil {
			t.Fatalf("%s decoded as a charge", typ)
		}
	}
	captured := &Event{ID: "evt_2", Type: "charge.captured", Data: []byte(`{"id":"ch_1","status":"succeeded","capture":false,"amount_captured":600}`)}
	if op, err := captured.Operation(); err == nil || !strings.Contains(err.Error(), "not capture.* or cancel.*") {
		t.Fatalf("charge.captured as an operation: %+v, %v", op, err)
	}
	charge, err := captured.Charge()
	if err != nil || charge.Capture || charge.AmountCaptured != 600 {
		t.Fatalf("charge.captured: %+v, %v", charge, err)
	}
}
