package client

import (
	"context"
	"net/http"
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
