package fakepsp_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/lockedbuf"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
)

const notifySecret = "whsec_fake_notifications_secret"

// wait is how long a test waits for a notification it expects.
const wait = 10 * time.Second

// notifying starts a provider of the fake protocol that notifies receiver,
// retrying fast, with schedule's faults.
func notifying(t *testing.T, receiver *fakepsptest.Receiver, schedule fakepsp.Schedule, edit ...func(*fakepsp.Config)) *testBundle {
	t.Helper()

	cfg := fakepsp.Config{Faults: schedule, Notifications: fakepsp.Notifications{
		URL: receiver.URL, Secret: notifySecret, Backoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, RetryFor: 5 * time.Second,
	}}
	for _, e := range edit {
		e(&cfg)
	}
	return setup(t, cfg)
}

// verified parses d with psp's parser and the provider's secret, requiring
// it to verify.
func verified(t *testing.T, d fakepsptest.Delivery) psp.Notification {
	t.Helper()

	n, err := psp.ParseNotification(notifySecret, d.Header, d.Body, time.Now(), 0)
	require.NoError(t, err, "body: %s", d.Body)
	return n
}

// firing is a schedule whose one rule always fires on keys with prefix.
func firing(on, fault string, ms int, prefix string) fakepsp.Schedule {
	rule := always(on, fault, ms)
	rule.KeyPrefix = prefix
	return fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{rule}}
}

// settled waits until the provider has nothing left to send.
func (b *testBundle) settled(t *testing.T) fakepsp.NotificationStats {
	t.Helper()

	var stats fakepsp.NotificationStats
	require.Eventually(t, func() bool {
		var err error
		stats, err = fakepsp.FetchNotifications(t.Context(), b.url)
		require.NoError(t, err)
		return stats.Pending == 0
	}, wait, 5*time.Millisecond)
	return stats
}

// A charge applied, a charge declined and a refund applied each reach the
// receiver as one signed notification that psp's parser verifies and reads
// as a lookup would answer; a replay applies nothing and notifies nothing.
func TestNotificationOfEachOperation(t *testing.T) {
	t.Parallel()

	receiver := fakepsptest.StartReceiver(t, nil)
	b := notifying(t, receiver, fakepsp.Schedule{})

	charge := b.charge(t, psp.ChargeRequest{Key: "pk_1", Amount: 1500, Currency: "EUR", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_1"})
	n := verified(t, receiver.Next(t, wait))
	require.Equal(t, psp.NotificationCharge, n.Kind)
	require.Equal(t, psp.EventChargeSucceeded, n.EventType)
	require.Equal(t, charge, n.Charge, "the notification says what a lookup says")
	require.Equal(t, "ch_1", n.Reference)
	require.Equal(t, charge.ID, n.ProviderID)
	require.Equal(t, "pk_1", n.ProviderKey)
	require.True(t, n.Actionable())

	again := b.charge(t, psp.ChargeRequest{Key: "pk_1", Amount: 1500, Currency: "EUR", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_1"})
	require.Equal(t, charge, again)

	declined := b.charge(t, psp.ChargeRequest{Key: "pk_2", Amount: 700, Currency: "USD", PaymentMethod: fakepsp.PaymentMethodInsufficientFunds, Reference: "ch_2"})
	n = verified(t, receiver.Next(t, wait))
	require.Equal(t, psp.EventChargeFailed, n.EventType)
	require.Equal(t, declined, n.Charge)
	require.Equal(t, "insufficient_funds", n.Charge.DeclineCode)
	require.Equal(t, "pk_2", n.ProviderKey)

	refund, err := b.client.Refund(t.Context(), psp.RefundRequest{Key: "rk_1", Charge: charge.ID, Amount: 500, Currency: "EUR", Reference: "re_1"})
	require.NoError(t, err)
	n = verified(t, receiver.Next(t, wait))
	require.Equal(t, psp.NotificationRefund, n.Kind)
	require.Equal(t, psp.EventRefundSucceeded, n.EventType)
	require.Equal(t, refund, n.Refund)
	require.Equal(t, "re_1", n.Reference)
	require.Equal(t, "rk_1", n.ProviderKey)

	// A refused refund applied nothing: no notification.
	_, err = b.client.Refund(t.Context(), psp.RefundRequest{Key: "rk_2", Charge: charge.ID, Amount: 5000, Currency: "EUR", Reference: "re_2"})
	require.NoError(t, err)
	receiver.Quiet(t, 200*time.Millisecond)

	stats := b.settled(t)
	require.Equal(t, fakepsp.NotificationStats{Enabled: true, Made: 3, Sent: 3, Attempts: 3}, stats)
	require.Len(t, receiver.Deliveries(), 3, "the replay of pk_1 notified nothing")
}

// The provider answers while the receiver is still holding the
// notification of that very charge.
func TestNotificationsDoNotHoldTheAnswer(t *testing.T) {
	t.Parallel()

	release := make(chan struct{})
	var once sync.Once
	receiver := fakepsptest.StartReceiver(t, func(int, fakepsptest.Delivery) int {
		<-release
		return http.StatusOK
	})
	b := notifying(t, receiver, fakepsp.Schedule{})
	t.Cleanup(func() { once.Do(func() { close(release) }) })

	start := time.Now()
	b.charge(t, psp.ChargeRequest{Key: "pk_1", Amount: 100, Currency: "EUR", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_1"})
	b.charge(t, psp.ChargeRequest{Key: "pk_2", Amount: 100, Currency: "EUR", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_2"})
	require.Less(t, time.Since(start), 2*time.Second)
	require.Eventually(t, func() bool { return b.provider.Notifications().Pending == 2 }, wait, 5*time.Millisecond,
		"both wait for the receiver, the first being sent")

	once.Do(func() { close(release) })
	require.Equal(t, "ch_1", verified(t, receiver.Next(t, wait)).Reference)
	require.Equal(t, "ch_2", verified(t, receiver.Next(t, wait)).Reference)
}

// A notification the receiver does not take is sent again, the same event
// signed anew, until it is taken; one never taken is given up on once
// RetryFor passed.
func TestNotificationRetries(t *testing.T) {
	t.Parallel()

	t.Run("until taken", func(t *testing.T) {
		t.Parallel()
		receiver := fakepsptest.StartReceiver(t, func(n int, _ fakepsptest.Delivery) int {
			return map[bool]int{true: http.StatusServiceUnavailable, false: http.StatusNoContent}[n <= 2]
		})
		b := notifying(t, receiver, fakepsp.Schedule{})
		b.charge(t, psp.ChargeRequest{Key: "pk_1", Amount: 100, Currency: "EUR", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_1"})

		first, second, third := receiver.Next(t, wait), receiver.Next(t, wait), receiver.Next(t, wait)
		require.Equal(t, []int{503, 503, 204}, []int{first.Status, second.Status, third.Status})
		require.Equal(t, first.Body, third.Body, "one event, sent again")
		for _, d := range []fakepsptest.Delivery{first, second, third} {
			require.Equal(t, "ch_1", verified(t, d).Reference)
		}
		require.Equal(t, fakepsp.NotificationStats{Enabled: true, Made: 1, Sent: 1, Attempts: 3}, b.settled(t))
		receiver.Quiet(t, 200*time.Millisecond)
	})

	t.Run("given up", func(t *testing.T) {
		t.Parallel()
		receiver := fakepsptest.StartReceiver(t, func(int, fakepsptest.Delivery) int { return http.StatusInternalServerError })
		b := notifying(t, receiver, fakepsp.Schedule{}, func(c *fakepsp.Config) { c.Notifications.RetryFor = 300 * time.Millisecond })
		b.charge(t, psp.ChargeRequest{Key: "pk_1", Amount: 100, Currency: "EUR", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_1"})

		stats := b.settled(t)
		require.Equal(t, 1, stats.Failed)
		require.Zero(t, stats.Sent)
		require.GreaterOrEqual(t, stats.Attempts, 3, "retried with backoff until RetryFor passed")
		for range stats.Attempts {
			require.Equal(t, http.StatusInternalServerError, receiver.Next(t, wait).Status)
		}
		receiver.Quiet(t, 300*time.Millisecond)
	})
}

// Each notification fault, as the receiver sees it.
func TestNotificationFaults(t *testing.T) {
	t.Parallel()

	t.Run("duplicate arrives twice with the same event id", func(t *testing.T) {
		t.Parallel()
		receiver := fakepsptest.StartReceiver(t, nil)
		b := notifying(t, receiver, firing(fakepsp.OnNotification, fakepsp.FaultDuplicate, 0, ""))
		b.charge(t, visa("pk_1"))

		first, second := verified(t, receiver.Next(t, wait)), verified(t, receiver.Next(t, wait))
		require.Equal(t, first.EventID, second.EventID)
		first.SignedAt, second.SignedAt = time.Time{}, time.Time{}
		require.Equal(t, first, second)
		require.Equal(t, fakepsp.NotificationStats{Enabled: true, Made: 1, Sent: 2, Attempts: 2, Duplicated: 1}, b.settled(t))
		require.Equal(t, 1, b.provider.Faults().Fired[fakepsp.FaultDuplicate])
	})

	t.Run("reorder arrives after the next one", func(t *testing.T) {
		t.Parallel()
		receiver := fakepsptest.StartReceiver(t, nil)
		b := notifying(t, receiver, firing(fakepsp.OnNotification, fakepsp.FaultReorder, 0, "held-"))
		b.charge(t, visa("held-1"))
		receiver.Quiet(t, 200*time.Millisecond)
		require.Equal(t, 1, b.provider.Notifications().Pending, "held until the next one")
		b.charge(t, visa("pk_2"))

		require.Equal(t, "ch_pk_2", verified(t, receiver.Next(t, wait)).Reference)
		require.Equal(t, "ch_held-1", verified(t, receiver.Next(t, wait)).Reference)
		require.Equal(t, fakepsp.NotificationStats{Enabled: true, Made: 2, Sent: 2, Attempts: 2, Reordered: 1}, b.settled(t))
	})

	t.Run("reorder with ms is sent once ms passed without a next one", func(t *testing.T) {
		t.Parallel()
		receiver := fakepsptest.StartReceiver(t, nil)
		b := notifying(t, receiver, firing(fakepsp.OnNotification, fakepsp.FaultReorder, 300, ""))
		start := time.Now()
		b.charge(t, visa("pk_1"))
		require.Equal(t, "ch_pk_1", verified(t, receiver.Next(t, wait)).Reference)
		require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	})

	t.Run("delay is overtaken", func(t *testing.T) {
		t.Parallel()
		receiver := fakepsptest.StartReceiver(t, nil)
		b := notifying(t, receiver, firing(fakepsp.OnNotification, fakepsp.FaultDelay, 400, "slow-"))
		start := time.Now()
		b.charge(t, visa("slow-1"))
		b.charge(t, visa("pk_2"))

		require.Equal(t, "ch_pk_2", verified(t, receiver.Next(t, wait)).Reference)
		require.Equal(t, "ch_slow-1", verified(t, receiver.Next(t, wait)).Reference)
		require.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond)
		require.Equal(t, fakepsp.NotificationStats{Enabled: true, Made: 2, Sent: 2, Attempts: 2, Delayed: 1}, b.settled(t))
	})

	t.Run("drop never arrives", func(t *testing.T) {
		t.Parallel()
		receiver := fakepsptest.StartReceiver(t, nil)
		b := notifying(t, receiver, firing(fakepsp.OnNotification, fakepsp.FaultDrop, 0, "lost-"))
		b.charge(t, visa("lost-1"))
		b.charge(t, visa("pk_2"))

		require.Equal(t, "ch_pk_2", verified(t, receiver.Next(t, wait)).Reference, "the one after it arrives")
		receiver.Quiet(t, 300*time.Millisecond)
		require.Equal(t, fakepsp.NotificationStats{Enabled: true, Made: 2, Sent: 1, Attempts: 1, Dropped: 1}, b.settled(t))
		require.Len(t, b.ledger(t, false), 2, "the charge was applied all the same")
	})

	t.Run("forge fails verification", func(t *testing.T) {
		t.Parallel()
		receiver := fakepsptest.StartReceiver(t, func(_ int, d fakepsptest.Delivery) int {
			if _, err := psp.ParseNotification(notifySecret, d.Header, d.Body, time.Now(), 0); err != nil {
				return http.StatusBadRequest
			}
			return http.StatusOK
		})
		b := notifying(t, receiver, firing(fakepsp.OnNotification, fakepsp.FaultForge, 0, "forged-"))
		first := b.charge(t, visa("forged-1"))
		b.charge(t, visa("forged-2"))

		wrongSecret, alteredBody := receiver.Next(t, wait), receiver.Next(t, wait)
		for _, d := range []fakepsptest.Delivery{wrongSecret, alteredBody} {
			_, err := psp.ParseNotification(notifySecret, d.Header, d.Body, time.Now(), 0)
			require.ErrorIs(t, err, psp.ErrNotificationForged)
			require.Equal(t, http.StatusBadRequest, d.Status)
		}

		var body struct {
			Data psp.ChargeNotification `json:"data"`
		}
		require.NoError(t, json.Unmarshal(wrongSecret.Body, &body))
		require.Equal(t, first.Amount, body.Data.Amount, "the first forgery carries the genuine body under a wrong secret")
		require.NoError(t, json.Unmarshal(alteredBody.Body, &body))
		require.Equal(t, 100*first.Amount, body.Data.Amount, "the next one an altered amount under the genuine signature")

		receiver.Quiet(t, 300*time.Millisecond) // a forgery is never retried
		require.Equal(t, fakepsp.NotificationStats{Enabled: true, Made: 2, Forged: 2}, b.settled(t))

		b.charge(t, visa("pk_3"))
		require.Equal(t, "ch_pk_3", verified(t, receiver.Next(t, wait)).Reference, "genuine ones still verify")
	})
}

// A delayed apply notifies when it applies, not when the request came.
func TestNotificationOfADelayedApply(t *testing.T) {
	t.Parallel()

	receiver := fakepsptest.StartReceiver(t, nil)
	b := notifying(t, receiver, firing(fakepsp.OnCharge, fakepsp.FaultDelayedApply, 400, ""))
	start := time.Now()
	_, err := b.clientWithTimeout(100*time.Millisecond).Charge(t.Context(),
		psp.ChargeRequest{Key: "pk_1", Amount: 100, Currency: "EUR", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_1"})
	require.ErrorIs(t, err, psp.ErrUnknownOutcome)

	n := verified(t, receiver.Next(t, wait))
	require.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond)
	require.Equal(t, "ch_1", n.Reference)
}

// Neither the secret nor a signature is ever logged, whatever happens to
// a notification: sent, refused and retried, forged, given up on.
func TestNotificationSecretNeverLogged(t *testing.T) {
	t.Parallel()

	var logs lockedbuf.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	receiver := fakepsptest.StartReceiver(t, func(n int, _ fakepsptest.Delivery) int {
		return map[bool]int{true: http.StatusBadGateway, false: http.StatusOK}[n%2 == 1]
	})
	b := notifying(t, receiver, fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{{On: fakepsp.OnNotification, Fault: fakepsp.FaultForge, P: 1, KeyPrefix: "forged-"}}},
		func(c *fakepsp.Config) { c.Logger = logger })
	for _, key := range []string{"pk_1", "forged-1", "forged-2", "pk_2"} {
		b.charge(t, psp.ChargeRequest{Key: key, Amount: 100, Currency: "EUR", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_" + key})
	}
	b.settled(t)
	require.NoError(t, b.provider.Close())

	deliveries := receiver.Deliveries()
	require.GreaterOrEqual(t, len(deliveries), 5, "failures, retries and forgeries were all exercised")
	text := logs.String()
	require.Contains(t, text, "notification not taken, retrying")
	require.Contains(t, text, "forged notification sent")
	require.NotContains(t, text, notifySecret)
	for _, d := range deliveries {
		signature := d.Header.Get(psp.NotificationSignatureHeader)
		_, v1, _ := strings.Cut(signature, "v1=")
		require.NotEmpty(t, v1)
		require.NotContains(t, text, v1)
	}
}

// What the provider refuses to start with, and what it says when it sends
// nothing.
func TestNotificationsConfig(t *testing.T) {
	t.Parallel()

	for name, cfg := range map[string]fakepsp.Notifications{
		"a URL without a secret": {URL: "http://127.0.0.1:1/hook"},
		"a relative URL":         {URL: "/hook", Secret: notifySecret},
		"another scheme":         {URL: "ftp://127.0.0.1/hook", Secret: notifySecret},
		"a negative retry":       {URL: "http://127.0.0.1:1/hook", Secret: notifySecret, RetryFor: -time.Second},
	} {
		_, err := fakepsp.New(fakepsp.Config{LedgerPath: t.TempDir() + "/ledger.jsonl", Notifications: cfg})
		require.ErrorIs(t, err, fakepsp.ErrNotificationConfig, name)
		require.NotContains(t, err.Error(), notifySecret)
	}

	b := setup(t, fakepsp.Config{})
	stats, err := fakepsp.FetchNotifications(t.Context(), b.url)
	require.NoError(t, err)
	require.Equal(t, fakepsp.NotificationStats{}, stats)

	// Notification faults act on notifications only.
	for _, rule := range []fakepsp.Rule{
		{On: fakepsp.OnCharge, Fault: fakepsp.FaultDuplicate, P: 1},
		{On: fakepsp.OnNotification, Fault: fakepsp.FaultLatency, P: 1},
		{On: fakepsp.OnNotification, Fault: "delay_forever", P: 1},
	} {
		require.ErrorIs(t, b.provider.SetFaults(fakepsp.Schedule{Rules: []fakepsp.Rule{rule}}), fakepsp.ErrInvalidSchedule, "%+v", rule)
	}
	schedule, err := fakepsp.ParseSchedule([]byte(`{"seed": 2, "rules": [{"on": "notification", "fault": "delay", "p": 0.5, "ms": 100}]}`))
	require.NoError(t, err)
	require.NoError(t, fakepsp.SetFaults(t.Context(), b.url, schedule))
}
