package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Attempt n waits a uniformly random time up to min(cap, base·2^(n-1)):
// never more, spread over the whole range, and without overflow however
// many attempts there were.
func TestBackoffIsCappedFullJitter(t *testing.T) {
	t.Parallel()
	c, err := New("http://127.0.0.1:1", "cfk_x", WithBackoff(100*time.Millisecond, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for attempt, ceiling := range map[int]time.Duration{
		1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond,
		4: 800 * time.Millisecond, 5: time.Second, 63: time.Second, 64: time.Second, 1 << 20: time.Second,
	} {
		low, high := ceiling, time.Duration(0)
		for range 2000 {
			d := c.backoff(attempt)
			if d < 0 || d > ceiling {
				t.Fatalf("attempt %d: %s outside [0, %s]", attempt, d, ceiling)
			}
			low, high = min(low, d), max(high, d)
		}
		if low > ceiling/10 || high < ceiling*9/10 {
			t.Fatalf("attempt %d: waits spread only over [%s, %s] of [0, %s]", attempt, low, high, ceiling)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	for name, build := range map[string]func() (*Client, error){
		"NoScheme":    func() (*Client, error) { return New("chargeflow.example.com", "cfk_x") },
		"OtherScheme": func() (*Client, error) { return New("ftp://chargeflow.example.com", "cfk_x") },
		"NoHost":      func() (*Client, error) { return New("https://", "cfk_x") },
		"NoKey":       func() (*Client, error) { return New("https://chargeflow.example.com", "") },
		"ZeroBase":    func() (*Client, error) { return New("https://x.example", "k", WithBackoff(0, time.Second)) },
		"CapBelowBase": func() (*Client, error) {
			return New("https://x.example", "k", WithBackoff(time.Second, time.Millisecond))
		},
		"NegativeLimit": func() (*Client, error) { return New("https://x.example", "k", WithMaxElapsed(-time.Second)) },
	} {
		if _, err := build(); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	c, err := New("https://chargeflow.example.com/", "cfk_x")
	if err != nil {
		t.Fatal(err)
	}
	if c.base.String() != "https://chargeflow.example.com" || c.http.Timeout != DefaultTimeout {
		t.Fatalf("base %s, timeout %s", c.base, c.http.Timeout)
	}
}

// Retry-After is read as seconds or as an HTTP date; anything else is no
// floor at all.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &Client{clock: fixedClock(now)}
	for value, want := range map[string]time.Duration{
		"":     0,
		"1":    time.Second,
		"120":  2 * time.Minute,
		"-3":   0,
		"soon": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		if got := c.retryAfter(value); got != want {
			t.Errorf("Retry-After %q: %s, want %s", value, got, want)
		}
	}
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

func (fixedClock) Sleep(context.Context, time.Duration) error { return nil }

// What is retried and what is not, by status and code.
func TestRetryable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		code   Code
		want   bool
	}{
		{409, CodeRequestInProgress, true},
		{409, CodeRefundExceedsCharge, false},
		{409, CodeChargeNotRefundable, false},
		{429, CodeRateLimited, true},
		{429, CodeTooManyAuthFailures, true},
		{503, CodeDatabaseUnavailable, true},
		{500, CodeInternal, true},
		{502, "", true},
		{504, "", true},
		{400, CodeInvalidField, false},
		{401, CodeUnauthorized, false},
		{404, CodeNotFound, false},
		{408, "", false},
		{413, CodeBodyTooLarge, false},
		{422, CodeIdempotencyKeyReused, false},
	} {
		if got := (&Error{Status: tc.status, Code: tc.code}).retryable(); got != tc.want {
			t.Errorf("%d %s: retryable %v, want %v", tc.status, tc.code, got, tc.want)
		}
	}
}

// recordingClock reads the real time and records the waits asked of it
// without waiting.
type recordingClock struct{ waits []time.Duration }

func (*recordingClock) Now() time.Time { return time.Now() }

func (c *recordingClock) Sleep(_ context.Context, d time.Duration) error {
	c.waits = append(c.waits, d)
	return nil
}

// refusedURL is the URL of a loopback port nothing listens on.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

// WithMaxElapsed(0) is one attempt: nothing is retried, and a create that
// got no answer is an unknown outcome.
func TestMaxElapsedZeroIsOneAttempt(t *testing.T) {
	t.Parallel()
	clock := &recordingClock{}
	c, err := New(refusedURL(t), "cfk_x", WithMaxElapsed(0), WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetCharge(context.Background(), "ch_x"); err == nil || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a read: %v", err)
	}
	_, err = c.CreateCharge(context.Background(), ChargeParams{Amount: 1, Currency: "USD", PaymentMethod: "pm_card_visa"})
	if !errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "stopped after 1 attempt:") {
		t.Fatalf("a create: %v", err)
	}
	if len(clock.waits) != 0 {
		t.Fatalf("waited %v", clock.waits)
	}
}

// A whole 2xx answer that is not what the client reads — another version
// of the API, or something else answering at its address — is not retried:
// it would read no better. For a create it may still have been a success,
// so the outcome is unknown. (The real API cannot answer this way; a stub
// does.)
func TestUndecodableAnswerIsNotRetried(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id": 42}`))
	}))
	t.Cleanup(stub.Close)
	clock := &recordingClock{}
	c, err := New(stub.URL, "cfk_x", WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateCharge(context.Background(), ChargeParams{Amount: 1, Currency: "USD", PaymentMethod: "pm_card_visa"})
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a create: %v", err)
	}
	if _, err := c.GetCharge(context.Background(), "ch_x"); err == nil || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a read: %v", err)
	}
	if requests.Load() != 2 || len(clock.waits) != 0 {
		t.Fatalf("%d requests, waits %v: want one each, none", requests.Load(), clock.waits)
	}
}
