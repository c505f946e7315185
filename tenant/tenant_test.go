package tenant_test

import (
	"context"
	"strings"
	"testing"

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
