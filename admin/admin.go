// Package admin is what an administrator does to tenants, their API keys,
// operators, provider accounts and routes — create, rotate, revoke, route —
// each with its record in the admin audit, written in the action's own
// transaction so that an action and its record commit together or not at
// all (docs/operations.md, "Administration"). The CLI (chargeflow tenant,
// operator, account, route, audit), `chargeflow all` and the operator
// page's administration call it; a record names ids and names, never a
// key, a token, a hash or a secret.
package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chargeflow/chargeflow/internal/pg"
	"github.com/chargeflow/chargeflow/internal/text"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/route"
	"github.com/chargeflow/chargeflow/tenant"
)

// The actions an audit entry records.
const (
	TenantCreated      = "tenant.created"
	KeyRotated         = "api_key.rotated"
	KeyRevoked         = "api_key.revoked"
	OperatorCreated    = "operator.created"
	OperatorRevoked    = "operator.revoked"
	OperatorTokenReset = "operator.token_reset"
	AccountAdded       = "provider_account.added"
	AccountDisabled    = "provider_account.disabled"
	RouteSet           = "route.set"
)

// MaxOverlap is the longest a rotated key may go on working.
const MaxOverlap = 30 * 24 * time.Hour

// ErrInvalidActor means an actor the audit cannot record: empty, over 200
// characters, not UTF-8 or holding a NUL.
var ErrInvalidActor = errors.New("admin: invalid actor")

// Service carries out administrators' actions on one database.
type Service struct{ db *pgxpool.Pool }

// New returns a Service on db.
func New(db *pgxpool.Pool) *Service { return &Service{db: db} }

// Entry is one record of the admin audit.
type Entry struct {
	ID      int64     `json:"id"`
	At      time.Time `json:"at"`
	Actor   string    `json:"actor"`
	Action  string    `json:"action"`
	Subject string    `json:"subject"`
	Detail  string    `json:"detail"`
}

// audited runs fn and records its action in one transaction.
func (s *Service) audited(ctx context.Context, actor, action string, fn func(tx pgx.Tx) (subject, detail string, err error)) error {
	if err := text.Check(actor, 200); err != nil || actor == "" {
		return ErrInvalidActor
	}
	// A change whose commit the standby did not confirm is not reported
	// done: a failover could bring back a key it revoked.
	return pg.Confirmed(ctx, func(ctx context.Context) error {
		return s.inTx(ctx, actor, action, fn)
	})
}

// inTx is audited's transaction.
func (s *Service) inTx(ctx context.Context, actor, action string, fn func(tx pgx.Tx) (subject, detail string, err error)) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		subject, detail, err := fn(tx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO admin_audit (actor, action, subject, detail) VALUES ($1, $2, $3, $4)`,
			actor, action, subject, detail); err != nil {
			return fmt.Errorf("admin audit: %w", err)
		}
		return nil
	})
}

// CreateTenant makes a tenant and its first API key, shown once.
func (s *Service) CreateTenant(ctx context.Context, actor, name string) (t tenant.Tenant, key string, err error) {
	err = s.audited(ctx, actor, TenantCreated, func(tx pgx.Tx) (string, string, error) {
		t, key, err = tenant.Create(ctx, tx, name)
		return t.ID, "name " + t.Name, err
	})
	return t, key, err
}

// RotateKey gives a tenant a new key, shown once, and makes its other keys
// stop working overlap from now (tenant.RotateKey).
func (s *Service) RotateKey(ctx context.Context, actor, tenantID string, overlap time.Duration) (key, keyID string, ending []string, err error) {
	if overlap < 0 || overlap > MaxOverlap {
		return "", "", nil, fmt.Errorf("admin: an overlap is 0 to %s", MaxOverlap)
	}
	err = s.audited(ctx, actor, KeyRotated, func(tx pgx.Tx) (string, string, error) {
		key, keyID, ending, err = tenant.RotateKey(ctx, tx, tenantID, overlap)
		return tenantID, fmt.Sprintf("new key %s; %d other keys end in %s", keyID, len(ending), overlap), err
	})
	return key, keyID, ending, err
}

// RevokeKey makes one of a tenant's keys stop working now.
func (s *Service) RevokeKey(ctx context.Context, actor, tenantID, keyID string) error {
	return s.audited(ctx, actor, KeyRevoked, func(tx pgx.Tx) (string, string, error) {
		return tenantID, "key " + keyID, tenant.RevokeKey(ctx, tx, tenantID, keyID)
	})
}

// CreateOperator makes an operator and its token, shown once.
func (s *Service) CreateOperator(ctx context.Context, actor, name string, role operator.Role) (o operator.Operator, token string, err error) {
	err = s.audited(ctx, actor, OperatorCreated, func(tx pgx.Tx) (string, string, error) {
		o, token, err = operator.Create(ctx, tx, name, role)
		return o.ID, "name " + o.Name + ", role " + string(o.Role), err
	})
	return o, token, err
}

// ResetOperatorToken gives the operator called name a new token, shown
// once; the old one stops working. found is false when there is no such
// active operator (nothing is recorded then).
func (s *Service) ResetOperatorToken(ctx context.Context, actor, name string) (o operator.Operator, token string, found bool, err error) {
	err = s.audited(ctx, actor, OperatorTokenReset, func(tx pgx.Tx) (string, string, error) {
		o, token, found, err = operator.ResetToken(ctx, tx, name)
		if err == nil && !found {
			err = errNothingToRecord
		}
		return o.ID, "name " + o.Name, err
	})
	if errors.Is(err, errNothingToRecord) {
		err = nil
	}
	return o, token, found, err
}

// errNothingToRecord rolls back an action that changed nothing.
var errNothingToRecord = errors.New("admin: nothing changed")

// RevokeOperator ends the active operator called name: its token and its
// page sessions.
func (s *Service) RevokeOperator(ctx context.Context, actor, name string) (o operator.Operator, err error) {
	err = s.audited(ctx, actor, OperatorRevoked, func(tx pgx.Tx) (string, string, error) {
		o, err = operator.Revoke(ctx, tx, name)
		return o.ID, "name " + o.Name, err
	})
	return o, err
}

// AddAccount creates a provider account (route.AddAccount). The record
// names the account's kind, endpoint and the variables its secrets are
// read from, never a secret.
func (s *Service) AddAccount(ctx context.Context, actor string, a route.Account) (added route.Account, err error) {
	err = s.audited(ctx, actor, AccountAdded, func(tx pgx.Tx) (string, string, error) {
		added, err = route.AddAccount(ctx, tx, a)
		detail := fmt.Sprintf("kind %s, endpoint %s", a.Kind, a.Endpoint)
		if a.CredentialEnv != "" {
			detail += ", key from $" + a.CredentialEnv
		}
		if a.WebhookSecretEnv != "" {
			detail += ", webhook secret from $" + a.WebhookSecretEnv
		}
		if a.MerchantAccount != "" {
			detail += ", merchant account " + a.MerchantAccount
		}
		return a.Name, detail, err
	})
	return added, err
}

// DisableAccount stops new charges from going to the account called name
// (route.DisableAccount).
func (s *Service) DisableAccount(ctx context.Context, actor, name string) (a route.Account, err error) {
	err = s.audited(ctx, actor, AccountDisabled, func(tx pgx.Tx) (string, string, error) {
		a, err = route.DisableAccount(ctx, tx, name)
		return name, "no new charges", err
	})
	return a, err
}

// SetRoute replaces a tenant's route (route.SetRoute); none sends its
// charges to the processes' own provider again.
func (s *Service) SetRoute(ctx context.Context, actor, tenantID string, entries []route.Entry) error {
	return s.audited(ctx, actor, RouteSet, func(tx pgx.Tx) (string, string, error) {
		shown := make([]string, len(entries))
		for i, e := range entries {
			shown[i] = e.String()
		}
		detail := "the processes' own provider"
		if len(entries) > 0 {
			detail = strings.Join(shown, " then ")
		}
		return tenantID, detail, route.SetRoute(ctx, tx, tenantID, entries)
	})
}

// Audit returns the newest limit records, newest first.
func (s *Service) Audit(ctx context.Context, limit int) ([]Entry, error) {
	rows, err := s.db.Query(ctx, `SELECT id, at, actor, action, subject, detail FROM admin_audit ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("read the admin audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Entry, error) {
		var e Entry
		err := row.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Subject, &e.Detail)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the admin audit: %w", err)
	}
	return out, nil
}
