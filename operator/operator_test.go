package operator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/tenant"
)

func TestOperators(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)

	admin, token, err := operator.Create(ctx, pool, "alice@example.com", operator.RoleAdmin)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(token, "cfo_"), token)
	require.True(t, operator.LooksLikeToken(token))
	require.Equal(t, "operator:alice@example.com", admin.Actor())

	got, err := operator.Authenticate(ctx, pool, token)
	require.NoError(t, err)
	require.Equal(t, admin, got)

	var stored []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT secret_hash FROM operators WHERE id = $1`, admin.ID).Scan(&stored))
	require.NotContains(t, token, string(stored), "only the hash is kept")

	// Anything else is refused, without saying why.
	_, apiKey, err := tenant.Create(ctx, pool, "merchant")
	require.NoError(t, err)
	viewer, viewerToken, err := operator.Create(ctx, pool, "victor", operator.RoleViewer)
	require.NoError(t, err)
	flipped := token[:len(token)-1] + map[bool]string{true: "b", false: "a"}[strings.HasSuffix(token, "a")]
	for _, bad := range []string{"", apiKey, token + "x", flipped, "cfo_" + strings.TrimPrefix(viewer.ID, "op_") + token[strings.LastIndex(token, "_"):]} {
		_, err := operator.Authenticate(ctx, pool, bad)
		require.ErrorIs(t, err, operator.ErrUnauthenticated, "%q", bad)
	}
	require.False(t, operator.LooksLikeToken(apiKey))

	// A reset token replaces the old one.
	reset, newToken, found, err := operator.ResetToken(ctx, pool, "alice@example.com")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, admin, reset)
	_, err = operator.Authenticate(ctx, pool, token)
	require.ErrorIs(t, err, operator.ErrUnauthenticated, "the old token stopped working")
	got, err = operator.Authenticate(ctx, pool, newToken)
	require.NoError(t, err)
	require.Equal(t, admin, got)
	_, _, found, err = operator.ResetToken(ctx, pool, "nobody")
	require.NoError(t, err)
	require.False(t, found)

	// A revoked operator's token stops working.
	_, err = pool.Exec(ctx, `UPDATE operators SET revoked_at = now() WHERE id = $1`, viewer.ID)
	require.NoError(t, err)
	_, err = operator.Authenticate(ctx, pool, viewerToken)
	require.ErrorIs(t, err, operator.ErrUnauthenticated)

	_, _, err = operator.Create(ctx, pool, "alice@example.com", operator.RoleViewer)
	require.ErrorIs(t, err, operator.ErrNameTaken)
	for _, tc := range []struct {
		name string
		role operator.Role
	}{{"", operator.RoleAdmin}, {"bob\nadmin", operator.RoleAdmin}, {strings.Repeat("a", 101), operator.RoleAdmin}, {"bob", "root"},
		{"bob\x00", operator.RoleAdmin}, {"bob\xff", operator.RoleAdmin}} {
		_, _, err := operator.Create(ctx, pool, tc.name, tc.role)
		require.ErrorIs(t, err, operator.ErrInvalid, "%q %q", tc.name, tc.role)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM operators`).Scan(&n))
	require.Equal(t, 2, n, "refused operators were not stored")
}
