package operator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chargeflow/chargeflow/internal/pg"
)

// Sessions are how the operator's page remembers who signed in: the token
// is presented once, and the browser then carries a random session id.
// Sessions are rows of operator_sessions, so that every API process knows
// every session and signing out ends a session everywhere; only sha256 of
// the id is stored (docs/architecture.md, "Operators").

// sessionPrefix starts every session id, so that one is never mistaken for
// a token or an API key, in a cookie jar or in a leak scanner's eyes.
const sessionPrefix = "cfs_"

var sessionEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// Session is a signed-in operator on the page.
type Session struct {
	// ID is the session's secret: the cookie's value, and the key of the
	// page's CSRF token. Only its hash is stored.
	ID        string
	Operator  Operator
	ExpiresAt time.Time
}

// StartSession signs op in for ttl and returns the new session, whose ID is
// shown to no one but the operator's browser. The same statement deletes
// every session that has expired, so the table holds only live sessions
// and the sessions of at most the last ttl's sign-ins.
func StartSession(ctx context.Context, db pg.Handle, op Operator, ttl time.Duration) (Session, error) {
	if ttl <= 0 {
		return Session{}, fmt.Errorf("start session: ttl %s must be positive", ttl)
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails (Go 1.24+).
	s := Session{ID: sessionPrefix + strings.ToLower(sessionEncoding.EncodeToString(raw[:])), Operator: op}
	hash := sha256.Sum256([]byte(s.ID))
	err := db.QueryRow(ctx, `
WITH expired AS (
	DELETE FROM operator_sessions WHERE expires_at <= now()
)
INSERT INTO operator_sessions (id_hash, operator_id, created_at, expires_at)
VALUES ($1, $2, now(), now() + $3::interval)
RETURNING expires_at`, hash[:], op.ID, ttl).Scan(&s.ExpiresAt)
	if err != nil {
		return Session{}, fmt.Errorf("start session of %s: %w", op.ID, err)
	}
	return s, nil
}

// FindSession returns the live session whose id this is: not expired, not
// ended, and of an operator who is not revoked, by the database's clock.
// Anything else is ErrUnauthenticated, and a malformed id costs no query.
func FindSession(ctx context.Context, db pg.Handle, id string) (Session, error) {
	hash, ok := sessionHash(id)
	if !ok {
		return Session{}, ErrUnauthenticated
	}
	s := Session{ID: id}
	err := db.QueryRow(ctx, `SELECT o.id, o.name, o.role, s.expires_at
		FROM operator_sessions s JOIN operators o ON o.id = s.operator_id
		WHERE s.id_hash = $1 AND s.expires_at > now() AND o.revoked_at IS NULL`, hash).
		Scan(&s.Operator.ID, &s.Operator.Name, &s.Operator.Role, &s.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrUnauthenticated
	}
	if err != nil {
		return Session{}, fmt.Errorf("find session: %w", err)
	}
	return s, nil
}

// EndSession signs a session out. Ending a session that does not exist is
// not an error: the outcome the caller wants holds.
func EndSession(ctx context.Context, db pg.Handle, id string) error {
	hash, ok := sessionHash(id)
	if !ok {
		return nil
	}
	if _, err := db.Exec(ctx, `DELETE FROM operator_sessions WHERE id_hash = $1`, hash); err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	return nil
}

// sessionHash is what is stored of a well-formed session id.
func sessionHash(id string) ([]byte, bool) {
	encoded, found := strings.CutPrefix(id, sessionPrefix)
	if !found || len(encoded) != sessionEncoding.EncodedLen(32) || strings.ToLower(encoded) != encoded {
		return nil, false
	}
	if _, err := sessionEncoding.DecodeString(strings.ToUpper(encoded)); err != nil {
		return nil, false
	}
	sum := sha256.Sum256([]byte(id))
	return sum[:], true
}
