package webhook

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/internal/pg"
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

// NewEndpoint makes an endpoint of tenantID to be created at now: its id
// and a fresh secret.
func NewEndpoint(tenantID, url string, events []string, now time.Time) Endpoint {
	now = now.UTC().Truncate(time.Microsecond) // Postgres keeps microseconds
	return Endpoint{TenantID: tenantID, ID: ids.New("we", now), URL: url, Events: events, Secret: NewSecret(), CreatedAt: now}
}

const endpointColumns = `tenant_id, id, url, events, secret, failures, last_success_at, disabled_at,
	coalesce(disabled_reason, ''), created_at`

func scanEndpoint(row pgx.Row) (Endpoint, error) {
	var e Endpoint
	err := row.Scan(&e.TenantID, &e.ID, &e.URL, &e.Events, &e.Secret, &e.Failures, &e.LastSuccessAt, &e.DisabledAt,
		&e.DisabledReason, &e.CreatedAt)
	return e, err
}

// MaxEndpoints is how many endpoints (not deleted) a tenant may have, as
// many as Stripe allows an account: every event is one signed POST to each
// subscribed endpoint, retried for hours, so endpoints without bound would
// make one charge a flood (docs/webhooks.md, "Endpoints").
const MaxEndpoints = 16

// ErrEndpointLimit means the tenant already has MaxEndpoints endpoints.
var ErrEndpointLimit = errors.New("webhook: the tenant has as many endpoints as allowed")

// Creation is everything written when an endpoint is created: the endpoint
// (its id, secret and creation time made by the caller, who rendered the
// answer from them) and the idempotency record of the request.
type Creation struct {
	Endpoint Endpoint
	// KeyHash is sha256 of the client's idempotency key; Fingerprint that
	// of the request. StatusCode and ResponseBody are the answer, replayed
	// byte for byte to a retry with the key, secret included, until
	// ExpiresAt (docs/webhooks.md, "Endpoints").
	KeyHash, Fingerprint []byte
	StatusCode           int
	ResponseBody         []byte
	ExpiresAt            time.Time
}

// CreateEndpoint writes a new endpoint and the idempotency record of the
// request that creates it, in one transaction, or nothing: it returns the
// record the tenant already stored under the key (created false), or
// ErrEndpointLimit. The caller has checked the URL (Policy.CheckURL) and
// the events (ValidType, or "*").
//
// A tenant's creations take turns (a transaction-scoped advisory lock on
// the tenant), so that two at once cannot both see room for one more. A
// request whose key another request still holds waits for it; with a
// lock_timeout on the session that wait ends in SQLSTATE 55P03, as for a
// charge.
//
// Like a charge's, its answer waits for the synchronous standby, a replay's
// too (intent.ReplayRecord): a commit the standby did not confirm fails with
// pg.ErrCommitUnconfirmed.
func CreateEndpoint(ctx context.Context, db Store, c Creation) (rec intent.IdempotencyRecord, created bool, err error) {
	err = pg.Confirmed(ctx, func(ctx context.Context) (err error) {
		rec, created, err = createEndpoint(ctx, db, c)
		return err
	})
	return rec, created, err
}

func createEndpoint(ctx context.Context, db Store, c Creation) (rec intent.IdempotencyRecord, created bool, err error) {
	e := c.Endpoint
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('chargeflow.webhook_endpoints.' || $1, 0))`, e.TenantID); err != nil {
			return fmt.Errorf("create webhook endpoint: %w", err)
		}
		var inserted int
		var room bool
		var fingerprint, body []byte
		var objectID *string
		var status *int
		var createdAt, expiresAt *time.Time
		err := tx.QueryRow(ctx, `
WITH existing AS (
	SELECT fingerprint, coalesce(charge_id, endpoint_id) AS object_id, status_code, response_body, created_at, expires_at
	FROM idempotency_keys WHERE tenant_id = $1 AND key_hash = $2 FOR KEY SHARE
), room AS (
	SELECT count(*) < $11 AS ok FROM webhook_endpoints WHERE tenant_id = $1 AND deleted_at IS NULL
), endpoint AS (
	INSERT INTO webhook_endpoints (tenant_id, id, url, events, secret, created_at)
	SELECT $1, $3, $4, $5, $6, $7 WHERE NOT EXISTS (SELECT 1 FROM existing) AND (SELECT ok FROM room)
	RETURNING tenant_id, id
), idem AS (
	INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, endpoint_id, status_code, response_body, created_at, expires_at)
	SELECT tenant_id, $2, $8, id, $9, $10, $7, $12 FROM endpoint
	ON CONFLICT (tenant_id, key_hash) DO NOTHING
	RETURNING 1
)
SELECT (SELECT count(*) FROM idem), (SELECT ok FROM room), e.*
FROM (SELECT 1) one LEFT JOIN existing e ON true`,
			e.TenantID, c.KeyHash, e.ID, e.URL, e.Events, e.Secret, e.CreatedAt, c.Fingerprint, c.StatusCode, c.ResponseBody,
			MaxEndpoints, c.ExpiresAt).Scan(&inserted, &room, &fingerprint, &objectID, &status, &body, &createdAt, &expiresAt)
		switch {
		case err != nil:
			return fmt.Errorf("create webhook endpoint: %w", err)
		case objectID != nil:
			rec = intent.IdempotencyRecord{Fingerprint: fingerprint, ChargeID: *objectID, StatusCode: *status,
				ResponseBody: body, CreatedAt: *createdAt, ExpiresAt: *expiresAt}
			return nil
		case inserted == 1:
			created = true
			return nil
		case !room:
			return ErrEndpointLimit
		}
		// The key was committed by a request that does not take the
		// tenant's turn (a charge's) while this statement waited on it:
		// the endpoint it wrote goes with the rollback, and the key's
		// record is the answer.
		return errKeyTaken
	})
	if errors.Is(err, errKeyTaken) {
		rec, err = intent.ReplayRecord(ctx, db, e.TenantID, c.KeyHash)
		return rec, false, err
	}
	return rec, created, err
}

// Store is a pool, or a transaction to make the call part of it.
type Store interface {
	pg.Handle
	Beginner
}

var errKeyTaken = errors.New("webhook: idempotency key taken meanwhile")

// EndpointListParams selects a page of a tenant's endpoints, newest first.
type EndpointListParams struct {
	TenantID string
	// Limit is the page size.
	Limit int
	// StartingAfter is the id of the last endpoint of the previous page.
	StartingAfter string
}

// Endpoints lists a page of a tenant's endpoints that are not deleted,
// newest first, and whether more follow it.
func Endpoints(ctx context.Context, db pg.Handle, p EndpointListParams) ([]Endpoint, bool, error) {
	query := `SELECT ` + endpointColumns + ` FROM webhook_endpoints WHERE tenant_id = $1 AND deleted_at IS NULL`
	args := []any{p.TenantID, p.Limit + 1}
	if p.StartingAfter != "" {
		query += ` AND id < $3`
		args = append(args, p.StartingAfter)
	}
	rows, err := db.Query(ctx, query+` ORDER BY id DESC LIMIT $2`, args...)
	if err != nil {
		return nil, false, fmt.Errorf("list webhook endpoints: %w", err)
	}
	endpoints, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Endpoint, error) { return scanEndpoint(row) })
	if err != nil {
		return nil, false, fmt.Errorf("list webhook endpoints: %w", err)
	}
	if len(endpoints) > p.Limit {
		return endpoints[:p.Limit], true, nil
	}
	return endpoints, false, nil
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
