// Package delivery is the River worker that carries an event to a
// merchant's webhook endpoint: the webhook.deliver job the events trigger
// writes with the move that caused the event (docs/webhooks.md).
//
// A delivery is one POST of the event object (the API's own rendering,
// package object) signed by the Standard Webhooks scheme, with the event's
// id as webhook-id on every retry, so a receiver that got it twice can tell.
// A 2xx delivers it; anything else — another status, a timeout, a refused
// connection, a redirect — is an attempt that failed, logged, and retried
// with capped backoff for more than a day (webhook.MaxAttempts); a delivery
// that fails every attempt disables its endpoint. The jobs run in their own
// queue, with their own workers, so a slow or hanging receiver never holds
// up a charge. Connections to loopback, private or link-local addresses
// are refused at dial time unless AllowPrivate, whatever the endpoint's
// name resolved to when it was created.
package delivery

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"chargeflow/crashpoint"
	"chargeflow/internal/backoff"
	"chargeflow/object"
	"chargeflow/webhook"
)

// Defaults.
const (
	// DefaultTimeout bounds one delivery, from dialing to the last byte of
	// the receiver's answer.
	DefaultTimeout = 10 * time.Second
	// DefaultBackoffBase and DefaultBackoffCap space the retries: 10 s
	// doubling to an hour, so webhook.MaxAttempts span more than a day.
	DefaultBackoffBase = 10 * time.Second
	DefaultBackoffCap  = time.Hour
)

// Config configures the worker.
type Config struct {
	DB     *pgxpool.Pool
	Logger *slog.Logger
	// AllowPrivate lets deliveries reach loopback and private addresses:
	// for tests and a laptop (--webhooks-allow-private).
	AllowPrivate bool
	Timeout      time.Duration
	BackoffBase  time.Duration
	BackoffCap   time.Duration
	// Now is the clock the signature's timestamp comes from.
	Now func() time.Time
	// CrashPoints are armed in tests and scenarios only; nil is disarmed.
	CrashPoints *crashpoint.Set
}

// Worker is the webhook.deliver worker.
type Worker struct {
	river.WorkerDefaults[webhook.DeliverArgs]
	cfg    Config
	client *http.Client
}

// NewWorker checks cfg and fills its defaults.
func NewWorker(cfg Config) (*Worker, error) {
	if cfg.DB == nil {
		return nil, errors.New("delivery: DB is required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.BackoffBase = cmp.Or(cfg.BackoffBase, DefaultBackoffBase)
	cfg.BackoffCap = cmp.Or(cfg.BackoffCap, DefaultBackoffCap)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	dialer := &net.Dialer{Timeout: cfg.Timeout}
	if !cfg.AllowPrivate {
		dialer.Control = webhook.DialControl
	}
	client := &http.Client{
		Timeout: cfg.Timeout,
		Transport: &http.Transport{
			DialContext:           dialer.DialContext,
			Proxy:                 nil, // a proxy would dial for us, past DialControl
			TLSHandshakeTimeout:   cfg.Timeout,
			ResponseHeaderTimeout: cfg.Timeout,
			MaxIdleConnsPerHost:   4,
		},
		// A redirect is an answer, not a 2xx: a receiver moves by updating
		// its endpoint, never by sending us elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Worker{cfg: cfg, client: client}, nil
}

// Timeout bounds one run: the delivery, plus the log's transaction.
func (w *Worker) Timeout(*river.Job[webhook.DeliverArgs]) time.Duration {
	return w.cfg.Timeout + 5*time.Second
}

// NextRetry spaces a failing delivery's attempts (internal/backoff).
func (w *Worker) NextRetry(job *river.Job[webhook.DeliverArgs]) time.Time {
	return time.Now().Add(backoff.Delay(job.Attempt, w.cfg.BackoffBase, w.cfg.BackoffCap))
}

// Work makes one attempt of a delivery and logs it.
func (w *Worker) Work(ctx context.Context, job *river.Job[webhook.DeliverArgs]) error {
	a := job.Args
	log := w.cfg.Logger.With("event_id", a.EventID, "endpoint_id", a.EndpointID, "tenant_id", a.TenantID, "attempt", job.Attempt)
	d, err := webhook.LoadDelivery(ctx, w.cfg.DB, a)
	if errors.Is(err, webhook.ErrNotFound) || errors.Is(err, webhook.ErrEndpointNotFound) {
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	if d.State != "pending" {
		return nil // delivered (or given up on) by an earlier run
	}
	outcome := webhook.Outcome{Attempt: job.Attempt, Final: true}
	switch {
	case d.Deleted:
		outcome.Error = "endpoint_deleted"
	case d.Endpoint.DisabledAt != nil:
		outcome.Error = "endpoint_disabled"
	default:
		if err := w.cfg.CrashPoints.Hit(ctx, crashpoint.DeliveryBeforePost); err != nil {
			return err
		}
		outcome = w.post(ctx, d)
		if err := w.cfg.CrashPoints.Hit(ctx, crashpoint.DeliveryAfterPostBeforeRecord); err != nil {
			return err
		}
		outcome.Attempt = job.Attempt
		outcome.Final = outcome.Delivered || job.Attempt >= job.MaxAttempts
	}
	if err := webhook.Record(ctx, w.cfg.DB, a, outcome); err != nil {
		return err
	}
	switch {
	case outcome.Delivered:
		log.InfoContext(ctx, "webhook delivered", "status", outcome.Status, "duration_ms", outcome.Duration.Milliseconds())
		return nil
	case outcome.Final:
		log.WarnContext(ctx, "webhook delivery given up", "error", outcome.Error, "status", outcome.Status)
		return nil
	}
	log.InfoContext(ctx, "webhook delivery failed; retrying", "error", outcome.Error, "status", outcome.Status)
	return fmt.Errorf("delivery attempt %d failed: %s", job.Attempt, cmp.Or(outcome.Error, "status "+strconv.Itoa(outcome.Status)))
}

// post sends the event to the endpoint once.
func (w *Worker) post(ctx context.Context, d webhook.Delivery) webhook.Outcome {
	start := time.Now()
	o := webhook.Outcome{}
	e := d.Event
	var rendered object.Event
	if ep := e.Endpoint; ep != nil { // webhook_endpoint.disabled, rendered as the API renders it
		rendered = object.EndpointEventOf(e.ID, e.Type, e.CreatedAt, object.EndpointOf(ep.ID, ep.URL, ep.Events, ep.DisabledAt, ep.DisabledReason, ep.CreatedAt))
	} else {
		rendered = object.EventOf(e.ID, e.Type, e.CreatedAt, e.Object)
	}
	body, err := json.Marshal(rendered)
	if err != nil {
		o.Error = "encode_failed"
		return o
	}
	timestamp := w.cfg.Now().Unix()
	signature, err := webhook.Sign(d.Endpoint.Secret, e.ID, timestamp, body)
	if err != nil {
		o.Error = "bad_secret"
		return o
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.Endpoint.URL, bytes.NewReader(body))
	if err != nil {
		o.Error = "bad_url"
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "chargeflow-webhooks/1")
	req.Header.Set("webhook-id", e.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(timestamp, 10))
	req.Header.Set("webhook-signature", signature)
	resp, err := w.client.Do(req)
	o.Duration = time.Since(start)
	if err != nil {
		o.Error = describe(err)
		return o
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	o.Status = resp.StatusCode
	o.Delivered = resp.StatusCode >= 200 && resp.StatusCode <= 299
	return o
}

// describe names a failed request's cause without its URL, which is the
// merchant's and may carry a token.
func describe(err error) string {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		err = urlErr.Err
	}
	var netErr net.Error
	switch {
	case errors.Is(err, webhook.ErrPrivateAddress):
		return "private_address"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return err.Error()
}
