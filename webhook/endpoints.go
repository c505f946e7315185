package webhook

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"chargeflow/internal/ids"
	"chargeflow/internal/pg"
)

// ErrEndpointNotFound means the tenant has no such endpoint (or it was
// deleted).
var ErrEndpointNotFound = errors.New("webhook: no such endpoint")

// Endpoint is where a tenant's events are delivered.
type Endpoint struct {
	TenantID string
	ID       string
	URL      string
	// Events are the types delivered, or "*" for all.
	Events []string
	// Secret signs every delivery (Sign); the API shows it once, at
	// creation.
	Secret         string
	Failures       int
	LastSuccessAt  *time.Time
	DisabledAt     *time.Time
	DisabledReason string
	CreatedAt      time.Time
}

// NewSecret makes a signing secret: "whsec_" and the base64 of 24 random
// bytes, as the Standard Webhooks scheme spells one.
func NewSecret() string {
	var key [24]byte
	_, _ = rand.Read(key[:]) // crypto/rand.Read never fails (Go 1.24+).
	return "whsec_" + base64.StdEncoding.EncodeToString(key[:])
}

const endpointColumns = `tenant_id, id, url, events, secret, failures, last_success_at, disabled_at,
	coalesce(disabled_reason, ''), created_at`

func scanEndpoint(row pgx.Row) (Endpoint, error) {
	var e Endpoint
	err := row.Scan(&e.TenantID, &e.ID, &e.URL, &e.Events, &e.Secret, &e.Failures, &e.LastSuccessAt, &e.DisabledAt,
		&e.DisabledReason, &e.CreatedAt)
	return e, err
}

// CreateEndpoint stores a new endpoint of tenantID with a fresh secret. The
// caller has checked url (CheckURL) and events (ValidType, or "*").
func CreateEndpoint(ctx context.Context, db pg.Handle, tenantID, url string, events []string) (Endpoint, error) {
	e, err := scanEndpoint(db.QueryRow(ctx, `INSERT INTO webhook_endpoints (tenant_id, id, url, events, secret)
		VALUES ($1, $2, $3, $4, $5) RETURNING `+endpointColumns,
		tenantID, ids.New("we", time.Now()), url, events, NewSecret()))
	if err != nil {
		return Endpoint{}, fmt.Errorf("create webhook endpoint: %w", err)
	}
	return e, nil
}

// Endpoints lists a tenant's endpoints that are not deleted, newest first.
func Endpoints(ctx context.Context, db pg.Handle, tenantID string) ([]Endpoint, error) {
	rows, err := db.Query(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints
		WHERE tenant_id = $1 AND deleted_at IS NULL ORDER BY id DESC`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	endpoints, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Endpoint, error) { return scanEndpoint(row) })
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	return endpoints, nil
}

// DeleteEndpoint stops deliveries to an endpoint: it is kept, marked
// deleted, so that its delivery log stays readable; deliveries still due
// to it end failed (endpoint_deleted).
func DeleteEndpoint(ctx context.Context, db pg.Handle, tenantID, id string) error {
	tag, err := db.Exec(ctx, `UPDATE webhook_endpoints SET deleted_at = now()
		WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL`, tenantID, id)
	if err != nil {
		return fmt.Errorf("delete webhook endpoint %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("webhook endpoint %s: %w", id, ErrEndpointNotFound)
	}
	return nil
}
