// Package delivery is the River worker that carries an event to a
// merchant's webhook endpoint: the webhook.deliver job the events trigger
// writes with the move that caused the event (docs/webhooks.md).
//
// A delivery is one POST of the event (the API's own rendering, package
// resource) signed by the Standard Webhooks scheme, with the event's
// id as webhook-id on every retry, so a receiver that got it twice can tell.
// A 2xx delivers it; anything else — another status, a timeout, a refused
// connection, a redirect — is an attempt that failed, logged, and retried
// with capped backoff, webhook.MaxAttempts times (about 31 hours with the
// defaults); a delivery that fails every attempt disables its endpoint. The
// jobs run in their own queue, with their own workers, so a slow or hanging
// receiver never holds up a charge. Connections to an address that is not
// globally reachable, or to a port not allowed, are refused at dial time
// unless AllowPrivate, whatever the endpoint's name resolved to when it was
// created (webhook.Policy). An attempt records one of webhook.AttemptErrors,
// never Go's error text, which goes to the log.
package delivery

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
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

	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/event"
	"github.com/chargeflow/chargeflow/internal/backoff"
	"github.com/chargeflow/chargeflow/internal/clock"
	"github.com/chargeflow/chargeflow/webhook"
)

// Defaults.
const (
	// DefaultTimeout bounds one delivery, from dialing to the last byte of
	// the receiver's answer.
	DefaultTimeout = 10 * time.Second
	// DefaultBackoffBase and DefaultBackoffCap space the retries: 10 s
	// doubling to an hour, so webhook.MaxAttempts span about 31 hours.
	DefaultBackoffBase = 10 * time.Second
	DefaultBackoffCap  = time.Hour
)

// Config configures the worker.
type Config struct {
	DB     *pgxpool.Pool
	Logger *slog.Logger
	// AllowPrivate lets deliveries reach loopback and private addresses, on
	// any port: for tests and a laptop (--webhooks-allow-private).
	AllowPrivate bool
	// Ports are the ports deliveries may reach; nil is
	// webhook.DefaultPorts (--webhook-ports).
	Ports       []uint16
	Timeout     time.Duration
	BackoffBase time.Duration
	BackoffCap  time.Duration
	// Now is the clock the signature's timestamp comes from: the worker's
	// own (clock.Now), which receivers hold to their tolerance
	// (docs/operations.md, "Clocks").
	Now func() time.Time
	// CrashPoints are armed in tests and scenarios only; nil is disarmed.
	CrashPoints *crashpoint.Set
}

// Worker is the webhook.deliver worker.
type Worker struct {
	river.WorkerDefaults[webhook.DeliverArgs]
	cfg    Config
	sender *Sender
}

// NewWorker checks cfg and fills its defaults.
func NewWorker(cfg Config) (*Worker, error) {
	if cfg.DB == nil {
		return nil, errors.New("delivery: DB is required")
	}
	if err := webhook.CheckPorts(cfg.Ports); err != nil {
		return nil, fmt.Errorf("delivery: %w", err)
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.BackoffBase = cmp.Or(cfg.BackoffBase, DefaultBackoffBase)
	cfg.BackoffCap = cmp.Or(cfg.BackoffCap, DefaultBackoffCap)
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	sender := NewSender(webhook.Policy{AllowPrivate: cfg.AllowPrivate, Ports: cfg.Ports}, cfg.Timeout, cfg.Now)
	return &Worker{cfg: cfg, sender: sender}, nil
}

// Sender makes one attempt of a webhook: the signed POST, its timeout, the
// address rule at dial time, what counts as delivered (a 2xx, never a
// redirect) and the fixed code of a failure. The worker sends every
// delivery with one; `chargeflow listen` forwards with one, so a webhook
// forwarded to a laptop is made exactly as a delivered one.
type Sender struct {
	client *http.Client
	now    func() time.Time
}

// NewSender makes a Sender whose connections policy allows, each attempt
// bounded by timeout, its signatures stamped by now.
func NewSender(policy webhook.Policy, timeout time.Duration, now func() time.Time) *Sender {
	dialer := &net.Dialer{Timeout: timeout, Control: policy.Control()}
	client := &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:           dialer.DialContext,
			Proxy:                 nil, // a proxy would dial for us, past the dialer's Control
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
			MaxIdleConnsPerHost:   4,
		},
		// A redirect is an answer, not a 2xx: a receiver moves by updating
		// its endpoint, never by sending us elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Sender{client: client, now: now}
}

// Timeout bounds one run: the delivery, plus the log's transaction.
func (w *Worker) Timeout(*river.Job[webhook.DeliverArgs]) time.Duration {
	return w.cfg.Timeout + 5*time.Second
}

// NextRetry spaces a failing delivery's attempts (internal/backoff), from
// the later of this process's clock and the attempt's start by the
// database's clock, as outbox.RetryPolicy does and for its reasons.
func (w *Worker) NextRetry(job *river.Job[webhook.DeliverArgs]) time.Time {
	from := clock.Now()
	if now := time.Now(); now.After(from) { // River's floor: its own reading of the host's clock
		from = now
	}
	if at := job.AttemptedAt; at != nil && at.After(from) {
		from = *at
	}
	return from.Add(backoff.Delay(job.Attempt, w.cfg.BackoffBase, w.cfg.BackoffCap))
}

// Work makes one attempt of a delivery and logs it.
func (w *Worker) Work(ctx context.Context, job *river.Job[webhook.DeliverArgs]) error {
	a := job.Args
	log := w.cfg.Logger.With("event_id", a.EventID, "endpoint_id", a.EndpointID, "tenant_id", a.TenantID, "attempt", job.Attempt)
	d, err := webhook.LoadDelivery(ctx, w.cfg.DB, a)
	if errors.Is(err, event.ErrNotFound) || errors.Is(err, webhook.ErrEndpointNotFound) {
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
		outcome.Error = webhook.AttemptEndpointDeleted
	case d.Endpoint.DisabledAt != nil:
		outcome.Error = webhook.AttemptEndpointDisabled
	default:
		if err := w.cfg.CrashPoints.Hit(ctx, crashpoint.DeliveryBeforePost); err != nil {
			return err
		}
		var cause error
		outcome, cause = w.post(ctx, d)
		if cause != nil {
			// The cause is for the operator: without the URL, which is the
			// merchant's and may carry a token (describe).
			log = log.With("cause", cause.Error())
		}
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

// post sends the event to the endpoint once. A failure's Go error is
// returned beside the outcome, for the log only.
func (w *Worker) post(ctx context.Context, d webhook.Delivery) (webhook.Outcome, error) {
	body, err := json.Marshal(d.Event.Resource())
	if err != nil {
		return webhook.Outcome{Error: webhook.AttemptInternal}, fmt.Errorf("encode event: %w", err)
	}
	return w.sender.Send(ctx, d.Endpoint.URL, d.Endpoint.Secret, d.Event.ID, body)
}

// Send POSTs body, the event eventID as the API renders it, to url once,
// signed with secret by the Standard Webhooks scheme, eventID as its
// webhook-id. A failure's Go error is returned beside the outcome, for a
// log only: its text may quote the URL, which is the merchant's.
func (s *Sender) Send(ctx context.Context, url, secret, eventID string, body []byte) (webhook.Outcome, error) {
	start := time.Now()
	o := webhook.Outcome{}
	timestamp := s.now().Unix()
	signature, err := webhook.Sign(secret, eventID, timestamp, body)
	if err != nil {
		o.Error = webhook.AttemptInternal
		return o, errors.New("sign event: the endpoint's secret is malformed")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		o.Error = webhook.AttemptInternal
		return o, errors.New("make request: the endpoint's url is malformed")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "chargeflow-webhooks/1")
	req.Header.Set("webhook-id", eventID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(timestamp, 10))
	req.Header.Set("webhook-signature", signature)
	resp, err := s.client.Do(req)
	o.Duration = time.Since(start)
	if err != nil {
		o.Error, err = describe(err)
		return o, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	o.Status = resp.StatusCode
	o.Delivered = resp.StatusCode >= 200 && resp.StatusCode <= 299
	return o, nil
}

// describe maps a failed request to one of webhook.AttemptErrors, and
// returns its cause without the *url.Error around it, whose text quotes the
// URL: the merchant's, which may carry a token.
func describe(err error) (string, error) {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		err = urlErr.Err
	}
	var netErr net.Error
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var recordErr tls.RecordHeaderError
	var alertErr tls.AlertError
	var verifyErr *tls.CertificateVerificationError
	var unknownAuthority x509.UnknownAuthorityError
	var hostnameErr x509.HostnameError
	var invalidCert x509.CertificateInvalidError
	switch {
	case errors.Is(err, webhook.ErrAddressNotAllowed), errors.Is(err, webhook.ErrPortNotAllowed):
		return webhook.AttemptAddressNotAllowed, err
	case errors.As(err, &dnsErr):
		return webhook.AttemptHostNotResolved, err
	case errors.As(err, &netErr) && netErr.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return webhook.AttemptTimeout, err
	case errors.As(err, &recordErr), errors.As(err, &alertErr), errors.As(err, &verifyErr), errors.As(err, &unknownAuthority),
		errors.As(err, &hostnameErr), errors.As(err, &invalidCert), errors.As(err, new(*tls.ECHRejectionError)),
		errors.As(err, &opErr) && opErr.Op == "remote error",
		// net/http's own words for a tls.RecordHeaderError from a server
		// that answered in plain HTTP, which it returns without the type.
		err.Error() == "http: server gave HTTP response to HTTPS client":
		return webhook.AttemptTLSFailed, err
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return webhook.AttemptConnectionFailed, err
	}
	return webhook.AttemptNoResponse, err
}
