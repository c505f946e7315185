package api_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
)

const notificationSecret = "whsec_test_notifications_0123456789"

// withNotifications makes the API receive the fake protocol's
// notifications, verified with notificationSecret.
func withNotifications(o *setupOpts) {
	o.API = func(cfg *api.Config) {
		cfg.NotificationsFrom = "fake"
		cfg.ProviderNotifications = func(h http.Header, body []byte, now time.Time) (psp.Notification, error) {
			return psp.ParseNotification(notificationSecret, h, body, now, 0)
		}
	}
}

// A charge whose answer was lost settles on the provider's notification,
// with no reconciler running; a duplicate, and one about a settled charge,
// change nothing; a forged one is refused and changes nothing.
func TestProviderNotificationSettlesAnUnknownCharge(t *testing.T) {
	t.Parallel()
	b := setup(t, withNotifications)
	provider := fakepsptest.Start(t, fakepsp.Config{
		Notifications: fakepsp.Notifications{URL: b.URL + "/v1/provider_webhooks/fake", Secret: notificationSecret},
		Faults: fakepsp.Schedule{Seed: 3, Rules: []fakepsp.Rule{
			{On: fakepsp.OnNotification, Fault: fakepsp.FaultDuplicate, P: 1},
		}},
	})
	client := psp.NewClient(psp.Config{BaseURL: provider.URL})

	charge := b.NewCharge(t, b.TenantA, "notified-charge-key-1")
	b.Walk(t, b.TenantA, charge, intent.StateSubmitting, intent.StateUnknown)
	// The call that was lost did reach the provider, which says so.
	_, err := client.Charge(context.Background(), psp.ChargeRequest{Key: intent.ProviderKeyFor(charge), Amount: 1000, Currency: "USD",
		PaymentMethod: "pm_card_visa", Reference: charge})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return apitest.Decode(t, b.Get(t, b.TenantA, "/v1/charges/"+charge))["status"] == "succeeded"
	},
		10*time.Second, 20*time.Millisecond, "settled by the notification, no reconciler running")
	require.Eventually(t, func() bool {
		counts, err := fakepsp.FetchNotifications(context.Background(), provider.URL)
		require.NoError(t, err)
		return counts.Sent >= 2
	}, 10*time.Second, 20*time.Millisecond, "the duplicate arrived too")
	last := b.LastEvent(t, charge)
	require.Equal(t, "provider_notification", last["actor"])
	require.Equal(t, "notification_succeeded", last["reason"])
	_, events := b.OpsCharge(t, charge)
	require.Len(t, events, 4, "created, submitting, unknown, succeeded: the duplicate moved nothing")

	// A notification of other money for a charge is never success.
	other := b.NewCharge(t, b.TenantA, "notified-charge-key-2")
	b.Walk(t, b.TenantA, other, intent.StateSubmitting)
	_, err = client.Charge(context.Background(), psp.ChargeRequest{Key: intent.ProviderKeyFor(other), Amount: 999, Currency: "USD",
		PaymentMethod: "pm_card_visa", Reference: other})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return apitest.Decode(t, b.Get(t, b.TenantA, "/v1/charges/"+other))["status"] == "needs_review"
	},
		10*time.Second, 20*time.Millisecond)
}

func TestProviderNotificationRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, withNotifications)
	charge := b.NewCharge(t, b.TenantA, "forged-charge-key-01")
	b.Walk(t, b.TenantA, charge, intent.StateSubmitting, intent.StateUnknown)
	body := `{"id":"evt_1","type":"charge.succeeded","created_at":"2026-01-01T00:00:00Z","data":{"id":"py_1","status":"succeeded","amount":1000,"currency":"USD","reference":"` + charge + `"}}`
	before := b.Stored(t)
	for _, tc := range []struct {
		name, path, signature string
		status                int
		code                  api.Code
	}{
		{"no signature", "/v1/provider_webhooks/fake", "", 400, api.CodeInvalidSignature},
		{"forged", "/v1/provider_webhooks/fake", "t=" + strconv.FormatInt(time.Now().Unix(), 10) + ",v1=" + strings.Repeat("ab", 32), 400, api.CodeInvalidSignature},
		{"another provider's path", "/v1/provider_webhooks/stripe", "", 404, api.CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := b.Request(t, http.MethodPost, tc.path, body, "Content-Type", "application/json", psp.NotificationSignatureHeader, tc.signature)
			apitest.RequireProblem(t, resp, tc.status, tc.code)
			require.Equal(t, before, b.Stored(t), "nothing changed")
		})
	}
	require.Equal(t, "unknown", apitest.Decode(t, b.Get(t, b.TenantA, "/v1/charges/"+charge))["status"])

	// Without a secret the route answers nothing.
	plain := setup(t)
	apitest.RequireProblem(t, plain.Request(t, http.MethodPost, "/v1/provider_webhooks/fake", body, "Content-Type", "application/json"),
		http.StatusNotFound, api.CodeNotFound)
}
