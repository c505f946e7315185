// Package event reads what merchants are told happened: their events.
// Postgres writes an event in the same transaction as every move that
// settles a charge or refund — to succeeded, failed or needs_review — and
// that a charge captured later makes (authorized, captured, canceled) or
// that settles its capture or cancel short of success (failed,
// needs_review), keeping the row as the move left it (migrations/functions/events_on_moves.sql),
// and one in the transaction that disables a webhook endpoint
// (events_on_endpoint_disabled.sql); this package reads them, for
// GET /v1/events and for webhook deliveries, and deletes them past their
// retention (docs/webhooks.md).
package event

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/pg"
	"github.com/chargeflow/chargeflow/resource"
)

// ErrNotFound means the tenant has no such event.
var ErrNotFound = errors.New("event: no such event")

// TypeEndpointDisabled is the event of an endpoint disabled after a
// delivery failed every attempt; it is about the endpoint, without its
// secret.
const TypeEndpointDisabled = "webhook_endpoint.disabled"

// The event types: a resource's kind and the state a move left it in. A
// capture's or cancel's success is its charge's: charge.captured,
// charge.canceled.
var Types = []string{
	"charge.succeeded", "charge.failed", "charge.needs_review",
	"charge.authorized", "charge.captured", "charge.canceled",
	"refund.succeeded", "refund.failed", "refund.needs_review",
	"capture.failed", "capture.needs_review", "cancel.failed", "cancel.needs_review",
	TypeEndpointDisabled,
}

// ValidType reports whether t is one of Types.
func ValidType(t string) bool {
	for _, known := range Types {
		if t == known {
			return true
		}
	}
	return false
}

// Event is one event: its type, and the charge, refund, capture or cancel
// as the move that caused it left it, or (TypeEndpointDisabled) the endpoint as its
// disabling left it.
type Event struct {
	TenantID string
	ID       string
	Type     string
	// Charge is the charge, refund, capture or cancel; zero when Endpoint
	// is set.
	Charge intent.Charge
	// Endpoint is the endpoint of a TypeEndpointDisabled event, rendered
	// without its secret; nil for the others.
	Endpoint  *resource.Endpoint
	CreatedAt time.Time
}

// Resource renders the event as the API shows it and webhooks carry it.
func (e Event) Resource() resource.Event {
	if e.Endpoint != nil {
		return resource.EndpointEventOf(e.ID, e.Type, e.CreatedAt, *e.Endpoint)
	}
	return resource.EventOf(e.ID, e.Type, e.CreatedAt, e.Charge)
}

const eventColumns = `tenant_id, id, type, snapshot, created_at`

func scanEvent(row pgx.Row) (Event, error) {
	var e Event
	var snapshot []byte
	if err := row.Scan(&e.TenantID, &e.ID, &e.Type, &snapshot, &e.CreatedAt); err != nil {
		return Event{}, err
	}
	if e.Type == TypeEndpointDisabled {
		endpoint, err := endpointFromSnapshot(snapshot)
		if err != nil {
			return Event{}, fmt.Errorf("event %s: %w", e.ID, err)
		}
		e.Endpoint = &endpoint
		return e, nil
	}
	charge, err := intent.FromSnapshot(snapshot)
	if err != nil {
		return Event{}, fmt.Errorf("event %s: %w", e.ID, err)
	}
	e.Charge = charge
	return e, nil
}

// endpointFromSnapshot renders a row of webhook_endpoints that Postgres
// encoded with to_jsonb, its secret removed
// (migrations/functions/events_on_endpoint_disabled.sql).
func endpointFromSnapshot(snapshot []byte) (resource.Endpoint, error) {
	var r struct {
		ID             string     `json:"id"`
		URL            string     `json:"url"`
		Events         []string   `json:"events"`
		DisabledAt     *time.Time `json:"disabled_at"`
		DisabledReason *string    `json:"disabled_reason"`
		CreatedAt      time.Time  `json:"created_at"`
	}
	if err := json.Unmarshal(snapshot, &r); err != nil {
		return resource.Endpoint{}, fmt.Errorf("decode endpoint snapshot: %w", err)
	}
	var reason string
	if r.DisabledReason != nil {
		reason = *r.DisabledReason
	}
	return resource.EndpointOf(r.ID, r.URL, r.Events, r.DisabledAt, reason, r.CreatedAt), nil
}

// Get reads one event of a tenant; another tenant's id is ErrNotFound.
func Get(ctx context.Context, db pg.Handle, tenantID, id string) (Event, error) {
	e, err := scanEvent(db.QueryRow(ctx, `SELECT `+eventColumns+` FROM events WHERE tenant_id = $1 AND id = $2`, tenantID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, fmt.Errorf("event %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Event{}, fmt.Errorf("read event %s: %w", id, err)
	}
	return e, nil
}

// ListParams selects a page of a tenant's events, newest first.
type ListParams struct {
	TenantID string
	// Type filters by type; "" lists every type.
	Type string
	// Limit is the page size.
	Limit int
	// StartingAfter is the id of the last event of the previous page.
	StartingAfter string
}

// List returns a page of events and whether more follow it.
func List(ctx context.Context, db pg.Handle, p ListParams) ([]Event, bool, error) {
	if p.TenantID == "" {
		return nil, false, errors.New("event: list the events of which tenant?")
	}
	// One statement per filter combination: a "($n = '' OR type = $n)"
	// form has a generic plan that reads every event of the tenant.
	where, args := "tenant_id = $1", []any{p.TenantID, p.Limit + 1}
	if p.Type != "" {
		args = append(args, p.Type)
		where += fmt.Sprintf(" AND type = $%d", len(args))
	}
	if p.StartingAfter != "" {
		args = append(args, p.StartingAfter)
		where += fmt.Sprintf(" AND id < $%d", len(args))
	}
	rows, err := db.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE `+where+` ORDER BY id DESC LIMIT $2`, args...)
	if err != nil {
		return nil, false, fmt.Errorf("list events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return scanEvent(row) })
	if err != nil {
		return nil, false, fmt.Errorf("list events: %w", err)
	}
	if len(events) > p.Limit {
		return events[:p.Limit], true, nil
	}
	return events, false, nil
}
