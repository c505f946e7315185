package opsplane_test

// The harness every test of this package shares is internal/apitest's;
// this adds the laboratory's fake provider, which no product package
// may import, and the names the tests use.

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
)

// testBundle is a server on a fresh database (internal/apitest) and the
// real fake provider it checks resolutions against.
type testBundle struct {
	*apitest.Bundle
	psp *fakepsptest.Provider
}

type (
	response     = apitest.Response
	stored       = apitest.Stored
	setupOpts    = apitest.Options
	testTenant   = apitest.Tenant
	testOperator = apitest.Operator
)

func setup(t testing.TB, opts ...func(*setupOpts)) *testBundle {
	t.Helper()
	provider := fakepsptest.Start(t, fakepsp.Config{})
	return &testBundle{Bundle: apitest.Setup(t, provider.URL, opts...), psp: provider}
}

// ledger counts what the fake provider applied: charges and lookups are
// not both here, but a refused resolution must never have sent a charge.
func (b *testBundle) ledger(t *testing.T) int {
	t.Helper()
	entries, err := fakepsp.FetchLedger(context.Background(), b.psp.URL, true)
	require.NoError(t, err)
	return len(entries)
}
