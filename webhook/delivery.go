package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chargeflow/chargeflow/event"
	"github.com/chargeflow/chargeflow/internal/pg"
)

// The job that carries one event to one endpoint. The events triggers write
// it (migrations/functions/events_on_moves.sql, decide_deliveries.sql), in
// the transaction of the move, into its own queue so that a slow or hanging
// receiver never holds up a charge's job.
const (
	KindDeliver = "webhook.deliver"
	Queue       = "webhooks"
	// MaxAttempts spaced by the delivery worker's backoff keep a failing
	// endpoint retried for about 31 hours with the default schedule (10 s
	// doubling to an hour). The events triggers write this number into
	// every webhook.deliver job they insert.
	MaxAttempts = 40
)

// DeliverArgs are a webhook.deliver job's arguments.
type DeliverArgs struct {
	TenantID   string `json:"tenant_id"`
	EventID    string `json:"event_id"`
	EndpointID string `json:"endpoint_id"`
}

// Kind is the River job kind.
func (DeliverArgs) Kind() string { return KindDeliver }

// Delivery is one event due at one endpoint.
type Delivery struct {
	Event    event.Event
	Endpoint Endpoint
	// State is pending, delivered or failed; Deleted says the endpoint was
	// deleted since.
	State    string
	Attempts int
	Deleted  bool
}

// LoadDelivery reads what a delivery job needs.
func LoadDelivery(ctx context.Context, db pg.Handle, a DeliverArgs) (Delivery, error) {
	var d Delivery
	var err error
	if d.Event, err = event.Get(ctx, db, a.TenantID, a.EventID); err != nil {
		return Delivery{}, err
	}
	var deletedAt *time.Time
	var e Endpoint
	err = db.QueryRow(ctx, `SELECT d.state, d.attempts, w.deleted_at, w.tenant_id, w.id, w.url, w.events, w.secret,
		w.failures, w.last_success_at, w.disabled_at, coalesce(w.disabled_reason, ''), w.created_at
		FROM webhook_deliveries d JOIN webhook_endpoints w ON (w.tenant_id, w.id) = (d.tenant_id, d.endpoint_id)
		WHERE d.tenant_id = $1 AND d.event_id = $2 AND d.endpoint_id = $3`, a.TenantID, a.EventID, a.EndpointID).
		Scan(&d.State, &d.Attempts, &deletedAt, &e.TenantID, &e.ID, &e.URL, &e.Events, &e.Secret, &e.Failures,
			&e.LastSuccessAt, &e.DisabledAt, &e.DisabledReason, &e.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, fmt.Errorf("delivery of %s to %s: %w", a.EventID, a.EndpointID, ErrEndpointNotFound)
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("read delivery of %s to %s: %w", a.EventID, a.EndpointID, err)
	}
	d.Endpoint, d.Deleted = e, deletedAt != nil
	return d, nil
}

// Outcome is what one attempt of a delivery got.
type Outcome struct {
	Attempt int
	// Status is the receiver's HTTP status, 0 when none came.
	Status   int
	Error    string
	Duration time.Duration
	// Delivered: a 2xx. Final: no attempt follows (delivered, or the
	// last one failed).
	Delivered, Final bool
}

// The errors an attempt records, and a merchant reads in its delivery log
// (GET /v1/events/{id}/deliveries): a closed set of fixed words, never Go's
// error text, which names resolvers, addresses and the library's insides
// (docs/webhooks.md, "Deliveries"). The cause goes to the worker's log.
// An attempt that got an answer records its status instead.
const (
	// AttemptAddressNotAllowed: the host resolved to an address, or the
	// URL names a port, that deliveries may not reach (Policy.Control).
	AttemptAddressNotAllowed = "address_not_allowed"
	// AttemptHostNotResolved: the host's name did not resolve.
	AttemptHostNotResolved = "host_not_resolved"
	// AttemptConnectionFailed: no connection (refused, unreachable, reset
	// while connecting).
	AttemptConnectionFailed = "connection_failed"
	// AttemptTimeout: no complete answer within --webhook-timeout.
	AttemptTimeout = "timeout"
	// AttemptTLSFailed: the TLS handshake failed (an untrusted or wrong
	// certificate, no TLS on the port).
	AttemptTLSFailed = "tls_failed"
	// AttemptNoResponse: connected, but the connection ended without a
	// complete HTTP answer.
	AttemptNoResponse = "no_response"
	// AttemptEndpointDeleted and AttemptEndpointDisabled: nothing was
	// sent, the endpoint was deleted or disabled since the event.
	AttemptEndpointDeleted  = "endpoint_deleted"
	AttemptEndpointDisabled = "endpoint_disabled"
	// AttemptInternal: chargeflow could not make the request.
	AttemptInternal = "internal_error"
)

// AttemptErrors are every error an attempt may record.
var AttemptErrors = []string{AttemptAddressNotAllowed, AttemptHostNotResolved, AttemptConnectionFailed, AttemptTimeout,
	AttemptTLSFailed, AttemptNoResponse, AttemptEndpointDeleted, AttemptEndpointDisabled, AttemptInternal}

// DisabledReason says why an endpoint was disabled, from what happened:
// how many attempts the delivery made and how long from the first to the
// last, so that it is true whatever the retry schedule (--webhook-retry-base,
// --webhook-retry-cap) was.
func DisabledReason(attempts int, span time.Duration) string {
	if attempts <= 1 {
		return "a delivery failed its only attempt"
	}
	if span < time.Second {
		return fmt.Sprintf("a delivery failed all %d of its attempts, made within a second", attempts)
	}
	return fmt.Sprintf("a delivery failed all %d of its attempts, made over %s", attempts, spanWords(span))
}

// spanWords spells a duration in whole units, rounded down, so that "over"
// holds: "31 hours", "5 minutes", "12 seconds".
func spanWords(d time.Duration) string {
	unit := func(n int64, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	switch {
	case d >= 48*time.Hour:
		return unit(int64(d/(24*time.Hour)), "day")
	case d >= 2*time.Hour:
		return unit(int64(d/time.Hour), "hour")
	case d >= 2*time.Minute:
		return unit(int64(d/time.Minute), "minute")
	}
	return unit(int64(d/time.Second), "second")
}

// Record writes an attempt to the delivery log, the delivery's state and
// the endpoint's failure count, in one transaction. An error outside
// AttemptErrors is recorded as AttemptInternal. A delivery whose every
// attempt failed disables its endpoint, with DisabledReason: an endpoint
// failing for that long is not a receiver down for a minute, and no more
// deliveries are decided for it until its owner creates a working one. A
// delivery that ends because its endpoint was deleted or disabled
// disables nothing.
func Record(ctx context.Context, db Beginner, a DeliverArgs, o Outcome) error {
	state := "pending"
	switch {
	case o.Delivered:
		state = "delivered"
	case o.Final:
		state = "failed"
	}
	if o.Error != "" && !slices.Contains(AttemptErrors, o.Error) {
		o.Error = AttemptInternal
	}
	disable := o.Final && !o.Delivered && o.Error != AttemptEndpointDeleted && o.Error != AttemptEndpointDisabled
	var status *int
	if o.Status != 0 {
		status = &o.Status
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO webhook_attempts (tenant_id, event_id, endpoint_id, attempt, status, error, duration_ms)
			VALUES ($1, $2, $3, $4, $5, nullif($6, ''), $7) ON CONFLICT DO NOTHING`,
			a.TenantID, a.EventID, a.EndpointID, o.Attempt, status, o.Error, o.Duration.Milliseconds()); err != nil {
			return fmt.Errorf("record delivery attempt: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE webhook_deliveries SET state = $4, attempts = greatest(attempts, $5), last_status = $6,
			last_error = nullif($7, ''), delivered_at = CASE WHEN $4 = 'delivered' THEN clock_timestamp() END, updated_at = clock_timestamp()
			WHERE tenant_id = $1 AND event_id = $2 AND endpoint_id = $3 AND state = 'pending'`,
			a.TenantID, a.EventID, a.EndpointID, state, o.Attempt, status, o.Error); err != nil {
			return fmt.Errorf("record delivery: %w", err)
		}
		var reason string
		if disable {
			var span time.Duration
			if err := tx.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM max(created_at) - min(created_at)), 0)::float8 * interval '1 second'
				FROM webhook_attempts WHERE tenant_id = $1 AND event_id = $2 AND endpoint_id = $3`,
				a.TenantID, a.EventID, a.EndpointID).Scan(&span); err != nil {
				return fmt.Errorf("read delivery span: %w", err)
			}
			reason = DisabledReason(o.Attempt, span)
		}
		_, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET
			failures = CASE WHEN $3 THEN 0 ELSE failures + 1 END,
			last_success_at = CASE WHEN $3 THEN now() ELSE last_success_at END,
			disabled_at = CASE WHEN $4 AND disabled_at IS NULL THEN now() ELSE disabled_at END,
			disabled_reason = CASE WHEN $4 AND disabled_at IS NULL THEN $5 ELSE disabled_reason END
			WHERE tenant_id = $1 AND id = $2`, a.TenantID, a.EndpointID, o.Delivered, disable, reason)
		if err != nil {
			return fmt.Errorf("record endpoint outcome: %w", err)
		}
		return nil
	})
}

// Beginner begins transactions: a pool or a connection.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Attempt is one row of an event's delivery log.
type Attempt struct {
	EndpointID string
	Attempt    int
	Status     *int
	Error      string
	Duration   time.Duration
	CreatedAt  time.Time
}

// DeliveryLog is an event's deliveries: each endpoint's state and attempts.
type DeliveryLog struct {
	EndpointID string
	State      string
	Attempts   []Attempt
}

// Log reads the delivery log of a tenant's event, endpoints in order.
func Log(ctx context.Context, db pg.Handle, tenantID, eventID string) ([]DeliveryLog, error) {
	rows, err := db.Query(ctx, `SELECT d.endpoint_id, d.state, a.attempt, a.status, coalesce(a.error, ''), a.duration_ms, a.created_at
		FROM webhook_deliveries d LEFT JOIN webhook_attempts a USING (tenant_id, event_id, endpoint_id)
		WHERE d.tenant_id = $1 AND d.event_id = $2 ORDER BY d.endpoint_id, a.attempt`, tenantID, eventID)
	if err != nil {
		return nil, fmt.Errorf("read delivery log of %s: %w", eventID, err)
	}
	defer rows.Close()
	var out []DeliveryLog
	for rows.Next() {
		var endpoint, state, errText string
		var attempt, ms *int
		var status *int
		var at *time.Time
		if err := rows.Scan(&endpoint, &state, &attempt, &status, &errText, &ms, &at); err != nil {
			return nil, fmt.Errorf("read delivery log of %s: %w", eventID, err)
		}
		if len(out) == 0 || out[len(out)-1].EndpointID != endpoint {
			out = append(out, DeliveryLog{EndpointID: endpoint, State: state, Attempts: []Attempt{}})
		}
		if attempt != nil {
			last := &out[len(out)-1]
			last.Attempts = append(last.Attempts, Attempt{EndpointID: endpoint, Attempt: *attempt, Status: status, Error: errText,
				Duration: time.Duration(*ms) * time.Millisecond, CreatedAt: *at})
		}
	}
	return out, rows.Err()
}
