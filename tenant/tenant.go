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
	key, _, err := newKey(ctx, db, tenantID)
	return key, err
}

func newKey(ctx context.Context, db DB, tenantID string) (key, keyID string, err error) {
	key, hash := keys().Mint(tenantID)
	keyID = ids.New("key", time.Now())
	if _, err := db.Exec(ctx, `INSERT INTO api_keys (tenant_id, id, secret_hash) VALUES ($1, $2, $3)`,
		tenantID, keyID, hash); err != nil {
		return "", "", fmt.Errorf("create api key: %w", err)
	}
	return key, keyID, nil
}

// Authenticate returns the tenant a key belongs to. A key is active until
// its revoked_at (none, or one still ahead: a key rotated with an overlap
// works until then). Every active key of that
// tenant is compared, in constant time, so the time taken does not depend on
// how much of the secret matched.
func Authenticate(ctx context.Context, db DB, apiKey string) (Tenant, error) {
	tenantID, presented, ok := keys().Parse(apiKey)
	if !ok {
		return Tenant{}, ErrUnauthenticated
	}
	rows, err := db.Query(ctx, `SELECT t.name, coalesce(t.rate_limit, 0), k.secret_hash
		FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
		WHERE k.tenant_id = $1 AND (k.revoked_at IS NULL OR k.revoked_at > now())`, tenantID)
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

// ErrNotFound means no such tenant, or no such active key of it.
var ErrNotFound = errors.New("tenant: not found")

// Listed is a tenant as an administrator lists it.
type Listed struct {
	Tenant
	CreatedAt time.Time
	// ActiveKeys counts its keys that authenticate now.
	ActiveKeys int
}

// List returns every tenant, oldest first. Tenants are few.
func List(ctx context.Context, db DB) ([]Listed, error) {
	rows, err := db.Query(ctx, `SELECT t.id, t.name, coalesce(t.rate_limit, 0), t.created_at,
		(SELECT count(*) FROM api_keys k WHERE k.tenant_id = t.id AND (k.revoked_at IS NULL OR k.revoked_at > now()))
		FROM tenants t ORDER BY t.id`)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Listed, error) {
		var l Listed
		err := row.Scan(&l.ID, &l.Name, &l.RateLimit, &l.CreatedAt, &l.ActiveKeys)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

// Key is an API key as an administrator sees it: never its secret or hash.
type Key struct {
	ID        string
	CreatedAt time.Time
	// RevokedAt is when it stops authenticating: nil for never, a time
	// ahead for a key rotated with an overlap.
	RevokedAt *time.Time
}

// Active reports whether the key authenticates at now.
func (k Key) Active(now time.Time) bool { return k.RevokedAt == nil || k.RevokedAt.After(now) }

// Keys returns a tenant's keys, newest first; ErrNotFound when there is no
// such tenant.
func Keys(ctx context.Context, db DB, tenantID string) ([]Key, error) {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)`, tenantID).Scan(&exists); err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	if !exists {
		return nil, fmt.Errorf("tenant %s: %w", tenantID, ErrNotFound)
	}
	rows, err := db.Query(ctx, `SELECT id, created_at, revoked_at FROM api_keys WHERE tenant_id = $1 ORDER BY id DESC`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Key, error) {
		var k Key
		err := row.Scan(&k.ID, &k.CreatedAt, &k.RevokedAt)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return out, nil
}

// RotateKey gives a tenant a new key and makes every key it had stop
// authenticating overlap from now (or at once, for 0), so the merchant
// can deploy the new key before the old one ends. A key already ending
// sooner keeps its end. It returns the new key, shown once, its id, and
// the keys it set to end. Run it in a transaction with its audit record.
func RotateKey(ctx context.Context, db DB, tenantID string, overlap time.Duration) (key, keyID string, ending []string, err error) {
	if overlap < 0 {
		return "", "", nil, errors.New("tenant: a key's overlap cannot be negative")
	}
	rows, err := db.Query(ctx, `UPDATE api_keys SET revoked_at = now() + make_interval(secs => $2)
		WHERE tenant_id = $1 AND (revoked_at IS NULL OR revoked_at > now() + make_interval(secs => $2))
		RETURNING id`, tenantID, overlap.Seconds())
	if err != nil {
		return "", "", nil, fmt.Errorf("rotate key: %w", err)
	}
	ending, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", "", nil, fmt.Errorf("rotate key: %w", err)
	}
	var exists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)`, tenantID).Scan(&exists); err != nil {
		return "", "", nil, fmt.Errorf("rotate key: %w", err)
	}
	if !exists {
		return "", "", nil, fmt.Errorf("tenant %s: %w", tenantID, ErrNotFound)
	}
	key, keyID, err = newKey(ctx, db, tenantID)
	return key, keyID, ending, err
}

// RevokeKey makes one of a tenant's keys stop authenticating now;
// ErrNotFound when the tenant has no such key that still authenticates.
func RevokeKey(ctx context.Context, db DB, tenantID, keyID string) error {
	tag, err := db.Exec(ctx, `UPDATE api_keys SET revoked_at = now()
		WHERE tenant_id = $1 AND id = $2 AND (revoked_at IS NULL OR revoked_at > now())`, tenantID, keyID)
	if err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("key %s of tenant %s: %w", keyID, tenantID, ErrNotFound)
	}
	return nil
}
