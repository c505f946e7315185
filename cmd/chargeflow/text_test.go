package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/tenant"
)

// The command line writes names to the database like the API writes a
// merchant's text, through the same check (internal/text): a name the
// database cannot store is refused with the flag's meaning, not a
// database error, and nothing is created.
func TestCreateCommandsRefuseNamesTheDatabaseCannotStore(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	getenv := func(k string) string { return map[string]string{"DATABASE_URL": dbURL}[k] }

	for _, tc := range []struct {
		args []string
		want error
	}{
		{[]string{"tenant", "create", "--name", "acme\x00"}, tenant.ErrInvalidName},
		{[]string{"tenant", "create", "--name", "caf\xe9"}, tenant.ErrInvalidName},
		{[]string{"operator", "create", "--name", "alice\x00", "--role", "admin"}, operator.ErrInvalid},
		{[]string{"operator", "create", "--name", "alice\xff", "--role", "admin"}, operator.ErrInvalid},
	} {
		var stdout bytes.Buffer
		err := run(context.Background(), tc.args, getenv, &stdout, &bytes.Buffer{})
		require.ErrorIs(t, err, tc.want, "%q", tc.args)
		require.Empty(t, stdout.String(), "no key or token printed")
	}
	pool := dbtest.NewPool(t, dbURL, 2)
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM tenants) + (SELECT count(*) FROM api_keys) + (SELECT count(*) FROM operators)`).Scan(&n))
	require.Zero(t, n, "nothing was created")
}
