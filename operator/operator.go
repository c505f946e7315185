// Package operator holds the people who run chargeflow and their tokens.
//
// Operators are not tenants. A merchant's API key ("cfk_…") serves the
// merchant API under /v1/ and is trusted with its own charges only; an
// operator's token ("cfo_…" + the operator's id without "op_" + "_" + a
// 256-bit secret) serves /ops/ and nothing else, and names the operator who
// acts: an operator's name in the audit trail always comes from the token,
// never from a request body. Only sha256 of the secret is stored, compared in
// constant time. Two roles: a viewer reads; an admin also forces lookups and
// resolves charges (docs/operations.md, "Operators").
//
// The operator's web page signs an operator in with the token once and then
// works with a session (session.go), stored in Postgres like the tokens.
package operator

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/internal/pg"
	"github.com/chargeflow/chargeflow/internal/secret"
	"github.com/chargeflow/chargeflow/internal/text"
)

// Role is what an operator may do.
type Role string

const (
	// RoleViewer reads charges, their timelines and the review queue.
	RoleViewer Role = "viewer"
	// RoleAdmin also forces lookups and resolves charges.
	RoleAdmin Role = "admin"
)

// Valid reports whether r is a role.
func (r Role) Valid() bool { return r == RoleViewer || r == RoleAdmin }

// Errors callers branch on.
var (
	// ErrUnauthenticated means the token is malformed, unknown or revoked.
	// Callers never learn which.
	ErrUnauthenticated = errors.New("operator: invalid token")
	// ErrNameTaken means another operator has the name.
	ErrNameTaken = errors.New("operator: name already taken")
	// ErrInvalid means a name or role that cannot be stored.
	ErrInvalid = errors.New("operator: invalid name or role")
	// ErrNotFound means no active operator has the name.
	ErrNotFound = errors.New("operator: no such active operator")
)

// Operator is one person with a token.
type Operator struct {
	ID   string
	Name string
	Role Role
}

// Actor is how the operator signs events: "operator:<name>".
func (o Operator) Actor() string { return "operator:" + o.Name }

// tokens is the kind of an operator's token.
func tokens() secret.Kind { return secret.Kind{Prefix: "cfo_", OwnerPrefix: "op"} }

// namePattern keeps names printable and short: they are shown on pages and
// written into audit events.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 ._@-]{0,99}$`)

// Create makes an operator and returns its token, shown once.
func Create(ctx context.Context, db pg.Handle, name string, role Role) (Operator, string, error) {
	// The pattern admits only what text.Check does, and less; both are
	// asked, so an operator's name goes through the one check of stored
	// text like every other.
	if text.Check(name, 100) != nil || !namePattern.MatchString(name) || !role.Valid() {
		return Operator{}, "", fmt.Errorf("%w: name %q (letters, digits, space . _ @ -; at most 100), role %q (admin or viewer)", ErrInvalid, name, role)
	}
	o := Operator{ID: ids.New("op", time.Now()), Name: name, Role: role}
	token, hash := tokens().Mint(o.ID)
	_, err := db.Exec(ctx, `INSERT INTO operators (id, name, role, secret_hash) VALUES ($1, $2, $3, $4)`, o.ID, o.Name, string(o.Role), hash)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return Operator{}, "", fmt.Errorf("%w: %q", ErrNameTaken, name)
	}
	if err != nil {
		return Operator{}, "", fmt.Errorf("create operator: %w", err)
	}
	return o, token, nil
}

// Authenticate returns the operator a token belongs to.
func Authenticate(ctx context.Context, db pg.Handle, token string) (Operator, error) {
	id, presented, ok := tokens().Parse(token)
	if !ok {
		return Operator{}, ErrUnauthenticated
	}
	o := Operator{ID: id}
	var stored []byte
	err := db.QueryRow(ctx, `SELECT name, role, secret_hash FROM operators WHERE id = $1 AND revoked_at IS NULL`, id).
		Scan(&o.Name, &o.Role, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return Operator{}, ErrUnauthenticated
	}
	if err != nil {
		return Operator{}, fmt.Errorf("authenticate operator: %w", err)
	}
	if !secret.Matches(stored, presented) {
		return Operator{}, ErrUnauthenticated
	}
	return o, nil
}

// LooksLikeToken reports whether s has an operator token's prefix, so that a
// caller can tell an operator's credential from a merchant's without I/O.
func LooksLikeToken(s string) bool { _, _, ok := tokens().Parse(s); return ok }

// ResetToken gives the operator called name a new token, by which the old
// one and every session of the operator's stop working, and returns it; found is false when there is no such
// operator. `chargeflow all` uses it for its demo operator, whose token it
// prints at every start.
func ResetToken(ctx context.Context, db pg.Handle, name string) (o Operator, token string, found bool, err error) {
	err = db.QueryRow(ctx, `SELECT id, name, role FROM operators WHERE name = $1 AND revoked_at IS NULL`, name).Scan(&o.ID, &o.Name, &o.Role)
	if errors.Is(err, pgx.ErrNoRows) {
		return Operator{}, "", false, nil
	}
	if err != nil {
		return Operator{}, "", false, fmt.Errorf("find operator %q: %w", name, err)
	}
	token, hash := tokens().Mint(o.ID)
	// A new token is what one asks for when the old one may have leaked, so
	// the sessions signed in with it end too.
	if _, err := db.Exec(ctx, `WITH ended AS (DELETE FROM operator_sessions WHERE operator_id = $1)
		UPDATE operators SET secret_hash = $2 WHERE id = $1`, o.ID, hash); err != nil {
		return Operator{}, "", false, fmt.Errorf("reset token of %q: %w", name, err)
	}
	return o, token, true, nil
}

// Listed is an operator as an administrator lists it.
type Listed struct {
	Operator
	CreatedAt time.Time
	// RevokedAt is when it was revoked; nil for an active operator.
	RevokedAt *time.Time
}

// List returns every operator, active or revoked, oldest first.
func List(ctx context.Context, db pg.Handle) ([]Listed, error) {
	rows, err := db.Query(ctx, `SELECT id, name, role, created_at, revoked_at FROM operators ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list operators: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Listed, error) {
		var l Listed
		err := row.Scan(&l.ID, &l.Name, &l.Role, &l.CreatedAt, &l.RevokedAt)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("list operators: %w", err)
	}
	return out, nil
}

// Revoke ends the active operator called name: its token stops working and
// its page sessions end everywhere at once, since both are checked against
// revoked_at. ErrNotFound when no active operator has the name.
func Revoke(ctx context.Context, db pg.Handle, name string) (Operator, error) {
	var o Operator
	err := db.QueryRow(ctx, `UPDATE operators SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL
		RETURNING id, name, role`, name).Scan(&o.ID, &o.Name, &o.Role)
	if errors.Is(err, pgx.ErrNoRows) {
		return Operator{}, fmt.Errorf("operator %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return Operator{}, fmt.Errorf("revoke operator: %w", err)
	}
	if _, err := db.Exec(ctx, `DELETE FROM operator_sessions WHERE operator_id = $1`, o.ID); err != nil {
		return Operator{}, fmt.Errorf("revoke operator: %w", err)
	}
	return o, nil
}
