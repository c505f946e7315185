package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// WebhookPlan makes a scenario a merchant's webhooks too: the runner serves
// a Receiver on loopback, registers it for every event type, lets the API
// and the workers deliver to loopback, and once every charge has settled
// waits for every delivery and checks InvariantWebhooks
// (docs/scenarios.md, "Webhooks").
type WebhookPlan struct {
	// FailRate is the share of deliveries the receiver answers 500.
	FailRate float64
}

// The workers retry deliveries 50 ms to 500 ms apart, not 10 s to an
// hour, so that a run converges in seconds; forty attempts still outlast
// any outage a scenario makes.
var webhookWorkerFlags = []string{"--webhook-retry-base", "50ms", "--webhook-retry-cap", "500ms"}

// webhookEnv lets the API accept, and the workers deliver to, an endpoint
// on loopback.
const webhookEnv = "WEBHOOKS_ALLOW_PRIVATE=1"

// startReceiver serves the scenario's receiver and registers it as the
// tenant's endpoint for every event type.
func (s *system) startReceiver(ctx context.Context) error {
	r, err := NewReceiver(ctx, s.seed, s.sc.Webhooks.FailRate)
	if err != nil {
		return err
	}
	s.receiver = r
	body := fmt.Sprintf(`{"url": %q, "events": ["*"]}`, r.URL)
	// One key for every attempt: a retry after a lost answer gets the
	// endpoint the first attempt made, with its secret, not a second one.
	key := fmt.Sprintf("scenario-endpoint-%d", s.seed)
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.api.url()+"/v1/webhook_endpoints", bytes.NewReader([]byte(body)))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+s.apiKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				var endpoint struct {
					Secret string `json:"secret"`
				}
				if err := json.Unmarshal(data, &endpoint); err != nil || endpoint.Secret == "" {
					return fmt.Errorf("webhook endpoint: no secret in %d answer", resp.StatusCode)
				}
				r.SetSecret(endpoint.Secret)
				return nil
			}
			err = fmt.Errorf("webhook endpoint: %d %s", resp.StatusCode, bytes.TrimSpace(data))
		}
		if attempt == 20 {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkWebhooks waits, up to bound, for every delivery to be delivered or
// given up on, then judges what reached the receiver (CheckWebhooks) and
// counts it: "webhooks:delivered", "webhooks:redelivered" (an event taken
// more than once: a worker died between the receiver's answer and the
// log), "webhooks:failed" (answered 500 on purpose), "webhooks:dropped"
// (cut while the receiver was down), "webhooks:skewed" (verified, though
// signed more than a minute from the receiver's clock).
func (s *system) checkWebhooks(ctx context.Context, rep *Report, bound time.Duration) error {
	if s.receiver == nil {
		return nil
	}
	pending, err := s.waitDelivered(ctx, bound)
	if err != nil {
		return err
	}
	if pending > 0 {
		rep.Violations = append(rep.Violations, Violation{InvariantWebhooks, "",
			fmt.Sprintf("%d deliveries still pending %s after every charge settled", pending, bound)})
	}
	violations, err := CheckWebhooks(ctx, s.pool, s.receiver)
	if err != nil {
		return err
	}
	rep.Violations = append(rep.Violations, violations...)
	stats := s.receiver.Stats()
	rep.Fired["webhooks:delivered"] = stats.Delivered
	rep.Fired["webhooks:redelivered"] = stats.Redelivered
	rep.Fired["webhooks:failed"] = stats.Failed
	rep.Fired["webhooks:dropped"] = stats.Dropped
	rep.Fired["webhooks:skewed"] = stats.Skewed
	return nil
}

// waitDelivered waits, up to bound, for every webhook delivery to be
// delivered or given up on, and returns how many are still pending.
func (s *system) waitDelivered(ctx context.Context, bound time.Duration) (int, error) {
	deadline := time.Now().Add(bound)
	for {
		var pending int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'`).Scan(&pending); err != nil {
			return 0, err
		}
		if pending == 0 || time.Now().After(deadline) {
			return pending, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// The webhook scenarios. Each sends charges through a provider that loses
// a fifth of its answers, so events are written by the worker and by the
// reconciler alike.
const webhookFaults = `{"seed": 29, "rules": [{"on": "charge", "fault": "apply_then_timeout", "p": 0.2, "ms": 1500}]}`

// webhooksReceiverDown: the merchant's receiver drops every connection for
// a while, a third of the way into the traffic.
func webhooksReceiverDown() Scenario {
	return Scenario{
		Name:     "webhooks-receiver-down",
		Summary:  "the merchant's webhook receiver drops every connection for a while mid-traffic; every event still arrives, signed, once it is back",
		Faults:   webhookFaults,
		Webhooks: &WebhookPlan{},
		Run: func(ctx context.Context, s *system) error {
			down := 4 * time.Second
			if !s.runner.cfg.Short {
				down = 15 * time.Second
			}
			_ = s.midTraffic(ctx, "hooks", s.charges(30, 300), func() error {
				s.logf("the webhook receiver goes down for %s", down)
				s.receiver.Down()
				time.Sleep(down)
				s.receiver.Up()
				return nil
			})
			s.settleUnderFaults(ctx)
			return nil
		},
		MustFire: []string{"webhooks:dropped"},
	}
}

// webhooksReceiverErrors: the receiver answers 500 to 30 % of deliveries,
// at random, throughout.
func webhooksReceiverErrors() Scenario {
	return Scenario{
		Name:     "webhooks-receiver-errors",
		Summary:  "the merchant's webhook receiver answers 500 to 30 % of deliveries at random; each is retried with the same webhook-id until taken",
		Faults:   webhookFaults,
		Webhooks: &WebhookPlan{FailRate: 0.3},
		Run:      standard(30, 300),
		MustFire: []string{"webhooks:failed"},
	}
}

// webhooksCrash: workers die around the settling move and around the
// delivery: before the move commits (no event may be delivered for it),
// after it committed and before the POST, and after the receiver took the
// event and before the attempt is logged (delivered again, with the same
// webhook-id). Each delivery point fires on a fifth of its hits, drawn
// from the run's seed, and each worker dies at its second settling
// transaction; a killed delivery waits for River's rescue, hence Slow.
func webhooksCrash() Scenario {
	return Scenario{
		Name:    "webhooks-crash",
		Summary: "workers die before a settling move commits, after it and before the delivery's POST, and after the receiver took it and before the log",
		Faults:  webhookFaults,
		WorkerEnv: []string{"CHARGEFLOW_CRASHPOINTS=" + crashPerBatch("worker.after_save_before_commit") + "," +
			"delivery.before_post=exit@0.2,delivery.after_post_before_record=exit@0.2"},
		Webhooks: &WebhookPlan{},
		Run:      standard(30, 100),
		MustFire: []string{"crashpoint:worker.after_save_before_commit", "crashpoint:delivery.before_post",
			"crashpoint:delivery.after_post_before_record", "webhooks:redelivered"},
		Slow: true,
	}
}
