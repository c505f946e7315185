package operator_test

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/operator"
)

// A session names its operator until it expires, is ended, or the operator
// is revoked or given a new token; only the id's hash is stored.
func TestSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	alice, _, err := operator.Create(ctx, pool, "alice", operator.RoleAdmin)
	require.NoError(t, err)
	victor, _, err := operator.Create(ctx, pool, "victor", operator.RoleViewer)
	require.NoError(t, err)

	s, err := operator.StartSession(ctx, pool, alice, time.Hour)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(s.ID, "cfs_"), s.ID)
	require.WithinDuration(t, time.Now().Add(time.Hour), s.ExpiresAt, time.Minute)
	found, err := operator.FindSession(ctx, pool, s.ID)
	require.NoError(t, err)
	require.Equal(t, alice, found.Operator)
	require.Equal(t, s.ID, found.ID)

	var stored []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT id_hash FROM operator_sessions`).Scan(&stored))
	sum := sha256.Sum256([]byte(s.ID))
	require.Equal(t, sum[:], stored, "only the hash is kept")

	// Malformed or unknown ids are refused alike.
	other, err := operator.StartSession(ctx, pool, victor, time.Hour)
	require.NoError(t, err)
	flipped := other.ID[:len(other.ID)-1] + map[bool]string{true: "b", false: "a"}[strings.HasSuffix(other.ID, "a")]
	for _, bad := range []string{"", "cfs_", s.ID + "a", strings.ToUpper(s.ID), flipped, "cfo_" + strings.TrimPrefix(s.ID, "cfs_")} {
		_, err := operator.FindSession(ctx, pool, bad)
		require.ErrorIs(t, err, operator.ErrUnauthenticated, "%q", bad)
	}

	// Signing out ends the session, and only that one; twice is fine.
	require.NoError(t, operator.EndSession(ctx, pool, s.ID))
	require.NoError(t, operator.EndSession(ctx, pool, s.ID))
	_, err = operator.FindSession(ctx, pool, s.ID)
	require.ErrorIs(t, err, operator.ErrUnauthenticated)
	_, err = operator.FindSession(ctx, pool, other.ID)
	require.NoError(t, err)

	// Revoking the operator ends its sessions at once.
	_, err = pool.Exec(ctx, `UPDATE operators SET revoked_at = now() WHERE id = $1`, victor.ID)
	require.NoError(t, err)
	_, err = operator.FindSession(ctx, pool, other.ID)
	require.ErrorIs(t, err, operator.ErrUnauthenticated)

	// A new token ends the sessions signed in with the old one.
	s, err = operator.StartSession(ctx, pool, alice, time.Hour)
	require.NoError(t, err)
	_, _, _, err = operator.ResetToken(ctx, pool, "alice")
	require.NoError(t, err)
	_, err = operator.FindSession(ctx, pool, s.ID)
	require.ErrorIs(t, err, operator.ErrUnauthenticated)

	// An expired session is refused, and the next sign-in deletes it.
	s, err = operator.StartSession(ctx, pool, alice, time.Hour)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE operator_sessions SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 hour'`)
	require.NoError(t, err)
	_, err = operator.FindSession(ctx, pool, s.ID)
	require.ErrorIs(t, err, operator.ErrUnauthenticated)
	fresh, err := operator.StartSession(ctx, pool, alice, time.Hour)
	require.NoError(t, err)
	var ids [][]byte
	rows, err := pool.Query(ctx, `SELECT id_hash FROM operator_sessions`)
	require.NoError(t, err)
	for rows.Next() {
		var id []byte
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	freshSum := sha256.Sum256([]byte(fresh.ID))
	require.Equal(t, [][]byte{freshSum[:]}, ids, "expired sessions were deleted")

	_, err = operator.StartSession(ctx, pool, alice, 0)
	require.Error(t, err)
}
