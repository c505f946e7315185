package crashpoint_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/crashpoint"
)

// A nil or zero Set does nothing at any point, in either build; without the
// lab tag no other Set can be made.
func TestZeroSetIsDisarmed(t *testing.T) {
	t.Parallel()

	for _, set := range []*crashpoint.Set{nil, {}} {
		require.False(t, set.Armed())
		for _, name := range crashpoint.Names() {
			require.NoError(t, set.Hit(context.Background(), name), name)
			require.False(t, set.Has(name), name)
		}
	}
}
