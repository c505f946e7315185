// Package tenant holds the merchants that use chargeflow and their API keys.
//
// An API key is "cfk_" + the tenant's id without its "tn_" prefix + "_" + a
// 256-bit secret in base32. The tenant id in the key lets the key be checked
// against that tenant's keys only (so every lookup is scoped by tenant, and
// tenants could later live in different databases); only sha256 of the
// secret is stored, and it is compared in constant time.
package tenant

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/internal/pg"
	"github.com/chargeflow/chargeflow/internal/secret"
	"github.com/chargeflow/chargeflow/internal/text"
)

// ErrUnauthenticated means the key is malformed, unknown, or revoked. Callers
// never learn which.
var ErrUnauthenticated = errors.New("tenant: invalid api key")

// ErrNameTaken means another tenant already has the name.
var ErrNameTaken = errors.New("tenant: name already taken")

// ErrInvalidName means a name the database cannot store: empty, longer than
// MaxName characters, not UTF-8 or holding a NUL (internal/text).
var ErrInvalidName = errors.New("tenant: invalid name")

// MaxName is the most characters a tenant's name may have.
const MaxName = 200

// DB is what this package needs from a handle (pool, conn or transaction).
type DB = pg.Handle

// Tenant is one merchant.
type Tenant struct {
	ID   string
	Name string
	// RateLimit is requests per second; 0 means the server's default.
	RateLimit int
}

// Create makes a tenant and its first API key, and returns the key. The key
// is shown once; only its hash is kept.
func Create(ctx context.Context, db DB, name string) (Tenant, string, error) {
	if err := text.Check(name, MaxName); err != nil || name == "" {
		// The name is not quoted: it could be any bytes.
		return Tenant{}, "", fmt.Errorf("%w: it must be 1 to %d characters of UTF-8 without NUL", ErrInvalidName, MaxName)
	}
	t := Tenant{ID: ids.New("tn", time.Now()), Name: name}
	_, err := db.Exec(ctx, `INSERT INTO tenants (id, name) VALUES ($1, $2)`, t.ID, t.Name)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return Tenant{}, "", fmt.Errorf("%w: %q", ErrNameTaken, name)
	}
	if err != nil {
		return Tenant{}, "", fmt.Errorf("create tenant: %w", err)
	}
	key, err := NewKey(ctx, db, t.ID)
	if err != nil {
		return Tenant{}, "", err
	}
	return t, key, nil
}

// ByName finds a tenant by its name; ErrNotFound-like absence is reported as
// a nil error with ok false.
func ByName(ctx context.Context, db DB, name string) (Tenant, bool, error) {
	var t Tenant
	err := db.QueryRow(ctx, `SELECT id, name, coalesce(rate_limit, 0) FROM tenants WHERE name = $1`, name).
		Scan(&t.ID, &t.Name, &t.RateLimit)
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, false, nil
	}
	if err != nil {
		return Tenant{}, false, fmt.Errorf("find tenant %q: %w", name, err)
	}
	return t, true, nil
}

// IDs returns every tenant's id, in order. Tenants are few and never
// deleted (tenants_kept), so a job that works tenant by tenant can read them
// all at its start.
func IDs(ctx context.Context, db DB) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT id FROM tenants ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

// keys is the kind of a tenant's API key: "cfk_", the tenant id without
// "tn_", "_", the secret.
func keys() secret.Kind { return secret.Kind{Prefix: "cfk_", OwnerPrefix: "tn"} }

// NewKey adds an API key to a tenant and returns it.
func NewKey(ctx context.Context, db DB, tenantID string) (string, error) {
	key, hash := keys().Mint(tenantID)
	_, err := db.Exec(ctx, `INSERT INTO api_keys (tenant_id, id, secret_hash) VALUES ($1, $2, $3)`,
		tenantID, ids.New("key", time.Now()), hash)
	if err != nil {
		return "", fmt.Errorf("create api key: %w", err)
	}
	return key, nil
}

// Authenticate returns the tenant a key belongs to. Every active key of that
// tenant is compared, in constant time, so the time taken does not depend on
// how much of the secret matched.
func Authenticate(ctx context.Context, db DB, apiKey string) (Tenant, error) {
	tenantID, presented, ok := keys().Parse(apiKey)
	if !ok {
		return Tenant{}, ErrUnauthenticated
	}
	rows, err := db.Query(ctx, `SELECT t.name, coalesce(t.rate_limit, 0), k.secret_hash
		FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
		WHERE k.tenant_id = $1 AND k.revoked_at IS NULL`, tenantID)
	if err != nil {
		return Tenant{}, fmt.Errorf("authenticate: %w", err)
	}
	defer rows.Close()
	t := Tenant{ID: tenantID}
	match := false
	for rows.Next() {
		var hash []byte
		if err := rows.Scan(&t.Name, &t.RateLimit, &hash); err != nil {
			return Tenant{}, fmt.Errorf("authenticate: %w", err)
		}
		match = secret.Matches(hash, presented) || match
	}
	if err := rows.Err(); err != nil {
		return Tenant{}, fmt.Errorf("authenticate: %w", err)
	}
	if !match {
		return Tenant{}, ErrUnauthenticated
	}
	return t, nil
}
