package tenant_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/tenant"
)

// A tenant's name is text the database stores: what it cannot store, or
// more than MaxName characters, is refused as ErrInvalidName before any
// statement, and nothing is written (no tenant, no key). The command line's
// `tenant create --name` calls this, as does every other caller.
func TestCreateRefusesNamesTheDatabaseCannotStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)

	for _, name := range []string{"", "acme\x00", "\x00", "caf\xe9", "\xed\xa0\x80", strings.Repeat("é", tenant.MaxName+1)} {
		_, key, err := tenant.Create(ctx, pool, name)
		require.ErrorIs(t, err, tenant.ErrInvalidName, "%q", name)
		require.Empty(t, key)
		if len(name) > 1 {
			require.NotContains(t, err.Error(), name, "the name is not quoted back")
		}
	}
	var tenants, keys int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tenants), (SELECT count(*) FROM api_keys)`).Scan(&tenants, &keys))
	require.Zero(t, tenants, "refused tenants were not stored")
	require.Zero(t, keys)

	created, key, err := tenant.Create(ctx, pool, strings.Repeat("é", tenant.MaxName))
	require.NoError(t, err, "MaxName characters are stored, though they take twice as many bytes")
	require.NotEmpty(t, key)
	found, ok, err := tenant.ByName(ctx, pool, strings.Repeat("é", tenant.MaxName))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, created.ID, found.ID)
}

// A key rotated with an overlap works until the overlap ends, whatever
// its unit; one rotated with none stops at once.
func TestRotateKeyOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	created, first, err := tenant.Create(ctx, pool, "rotating")
	require.NoError(t, err)
	second, _, ending, err := tenant.RotateKey(ctx, pool, created.ID, 1500*time.Microsecond+time.Hour)
	require.NoError(t, err)
	require.Len(t, ending, 1)
	for _, k := range []string{first, second} {
		_, err := tenant.Authenticate(ctx, pool, k)
		require.NoError(t, err, "both work during the overlap")
	}
	third, _, ending, err := tenant.RotateKey(ctx, pool, created.ID, 0)
	require.NoError(t, err)
	require.Len(t, ending, 2)
	for _, k := range []string{first, second} {
		_, err := tenant.Authenticate(ctx, pool, k)
		require.ErrorIs(t, err, tenant.ErrUnauthenticated)
	}
	_, err = tenant.Authenticate(ctx, pool, third)
	require.NoError(t, err)
	_, _, _, err = tenant.RotateKey(ctx, pool, created.ID, -time.Second)
	require.Error(t, err)
	require.NoError(t, tenant.RevokeKey(ctx, pool, created.ID, mustKeyID(t, pool, created.ID)))
	_, err = tenant.Authenticate(ctx, pool, third)
	require.ErrorIs(t, err, tenant.ErrUnauthenticated)
}

func mustKeyID(t *testing.T, pool tenant.DB, tenantID string) string {
	t.Helper()
	keys, err := tenant.Keys(context.Background(), pool, tenantID)
	require.NoError(t, err)
	return keys[0].ID
}
