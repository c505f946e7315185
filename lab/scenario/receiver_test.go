package scenario_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/scenario"
	"github.com/chargeflow/chargeflow/webhook"
)

// The receiver verifies what it is sent, and CheckWebhooks finds every way
// a delivery can go wrong: an event not delivered, a delivery that does
// not verify, a webhook-id that is not the event's, an event never
// written, an event of a move the audit trail does not have.
func TestReceiverAndCheckWebhooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenant := dbtest.Tenant(t, pool, "receiver")
	secret := webhook.NewSecret()
	settled := func(to intent.State) (charge string, event string) {
		c := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenant})
		_, err := intent.MoveCharge(ctx, pool, intent.Move{TenantID: tenant, ChargeID: c.ID, From: intent.StatePending, To: to,
			Actor: "test", Reason: "test", FailureCode: "card_declined"})
		require.NoError(t, err)
		require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM events WHERE object_id = $1`, c.ID).Scan(&event))
		return c.ID, event
	}
	check := func(r *scenario.Receiver) []scenario.Violation {
		violations, err := scenario.CheckWebhooks(ctx, pool, r)
		require.NoError(t, err)
		return violations
	}
	// postSkewed sends a delivery as a worker whose clock is skew off
	// does, signed with key; post as one whose clock is right.
	postSkewed := func(r *scenario.Receiver, id, key, body string, skew time.Duration) int {
		ts := time.Now().Add(skew).Unix()
		signature, err := webhook.Sign(key, id, ts, []byte(body))
		require.NoError(t, err)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader([]byte(body)))
		require.NoError(t, err)
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("webhook-signature", signature)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	post := func(r *scenario.Receiver, id, key, body string) int { return postSkewed(r, id, key, body, 0) }
	eventBody := func(id, charge, state string) string {
		return fmt.Sprintf(`{"id": %q, "type": "charge.%s", "created_at": "2026-11-30T00:00:00Z", "data": {"id": %q, "status": %q}}`, id, state, charge, state)
	}
	newReceiver := func(failRate float64) *scenario.Receiver {
		r, err := scenario.NewReceiver(t.Context(), 1, failRate)
		require.NoError(t, err)
		r.SetSecret(secret)
		return r
	}

	failedCharge, failedEvent := settled(intent.StateFailed)
	r := newReceiver(0)
	require.Len(t, check(r), 1, "the failed charge's event was not delivered")
	require.Equal(t, http.StatusOK, post(r, failedEvent, secret, eventBody(failedEvent, failedCharge, "failed")))
	require.Equal(t, http.StatusOK, post(r, failedEvent, secret, eventBody(failedEvent, failedCharge, "failed")))
	require.Empty(t, check(r), "delivered, twice: at least once is enough")
	require.Equal(t, scenario.ReceiverStats{Attempts: 2, Delivered: 1, Redelivered: 1}, r.Stats())

	for name, deliver := range map[string]func(r *scenario.Receiver) int{
		"another secret": func(r *scenario.Receiver) int {
			return post(r, failedEvent, webhook.NewSecret(), eventBody(failedEvent, failedCharge, "failed"))
		},
		"webhook-id not the event's": func(r *scenario.Receiver) int {
			return post(r, "evt_01kqzzzzzzzzzzzzzzzzzzzzzz", secret, eventBody(failedEvent, failedCharge, "failed"))
		},
		"an event never written": func(r *scenario.Receiver) int {
			return post(r, "evt_01kqzzzzzzzzzzzzzzzzzzzzzz", secret, eventBody("evt_01kqzzzzzzzzzzzzzzzzzzzzzz", failedCharge, "failed"))
		},
		"a move that did not happen": func(r *scenario.Receiver) int {
			return post(r, failedEvent, secret, eventBody(failedEvent, failedCharge, "succeeded"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := newReceiver(0)
			post(r, failedEvent, secret, eventBody(failedEvent, failedCharge, "failed"))
			deliver(r)
			require.NotEmpty(t, check(r))
		})
	}

	// Answered 500, a delivery is not delivered; down, it is dropped.
	flaky := newReceiver(1)
	require.Equal(t, http.StatusInternalServerError, post(flaky, failedEvent, secret, eventBody(failedEvent, failedCharge, "failed")))
	require.Len(t, check(flaky), 1)
	flaky.SetFailRate(0)
	flaky.Down()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, flaky.URL, bytes.NewReader([]byte("{}")))
	require.NoError(t, err)
	_, err = http.DefaultClient.Do(req)
	require.Error(t, err, "a receiver that is down drops the connection")
	flaky.Up()
	require.Equal(t, http.StatusOK, post(flaky, failedEvent, secret, eventBody(failedEvent, failedCharge, "failed")))
	require.Empty(t, check(flaky))
	require.Equal(t, scenario.ReceiverStats{Attempts: 3, Dropped: 1, Failed: 1, Delivered: 1}, flaky.Stats())

	// Signed by a worker four minutes behind, a delivery verifies and is
	// counted skewed; six minutes behind or ahead, past the five minutes of
	// tolerance, it is refused.
	skewed := newReceiver(0)
	require.Equal(t, http.StatusOK, postSkewed(skewed, failedEvent, secret, eventBody(failedEvent, failedCharge, "failed"), -4*time.Minute))
	require.Equal(t, http.StatusBadRequest, postSkewed(skewed, failedEvent, secret, eventBody(failedEvent, failedCharge, "failed"), -6*time.Minute))
	require.Equal(t, http.StatusBadRequest, postSkewed(skewed, failedEvent, secret, eventBody(failedEvent, failedCharge, "failed"), 6*time.Minute))
	require.Equal(t, scenario.ReceiverStats{Attempts: 3, Forged: 2, Delivered: 1, Skewed: 1}, skewed.Stats())
}
