package intent_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
)

func TestReroute(t *testing.T) {
	t.Parallel()

	t.Run("MovesAPendingChargeWithItsEvidenceAndANewKey", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.accept(ctx, t, "reroute-00000000001")
		// Sent once, proven not applied: pending again, with its times.
		c = dbtest.Walk(t, b.pool, c, "", intent.StateSubmitting)
		_, err := intent.MoveCharge(ctx, b.pool, intent.Move{TenantID: c.TenantID, ChargeID: c.ID, From: intent.StateSubmitting,
			To: intent.StatePending, Actor: "test", Reason: "not_applied:connection_refused"})
		require.NoError(t, err)
		proof, err := intent.PendingProof(ctx, b.pool, c.TenantID, c.ID, "")
		require.NoError(t, err)
		require.Equal(t, "not_applied:connection_refused", proof)

		moved, err := intent.RerouteCharge(ctx, b.pool, intent.Reroute{TenantID: c.TenantID, ChargeID: c.ID, From: c.Provider,
			To: "backup", Actor: "test", Evidence: "not held: " + proof})
		require.NoError(t, err)
		require.Equal(t, intent.StatePending, moved.State)
		require.Equal(t, "backup", moved.Provider)
		require.Equal(t, "cf_"+c.ID+"_1", moved.ProviderKey, "the new account gets its own key")
		require.Zero(t, moved.Attempts, "nothing was sent under the new key")
		require.Nil(t, moved.FirstAttemptAt, "its key window has not started")

		proof, err = intent.PendingProof(ctx, b.pool, c.TenantID, c.ID, "")
		require.NoError(t, err)
		require.Empty(t, proof, "nothing was ever sent to the new account")

		trail, err := intent.AuditTrail(ctx, b.pool, b.tenantID, c.ID)
		require.NoError(t, err)
		last := trail[len(trail)-1]
		require.Equal(t, intent.ActionReroute, last.Action)
		require.Equal(t, "rerouted_from:"+c.Provider, last.Reason)
		require.Equal(t, "not held: not_applied:connection_refused", last.Evidence)

		again, err := intent.RerouteCharge(ctx, b.pool, intent.Reroute{TenantID: c.TenantID, ChargeID: c.ID, From: "backup",
			To: "third", Actor: "test", Evidence: "not held"})
		require.NoError(t, err)
		require.Equal(t, "cf_"+c.ID+"_2", again.ProviderKey)
	})

	t.Run("OnlyFromPendingAtItsAccount", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := dbtest.Walk(t, b.pool, b.accept(ctx, t, "reroute-00000000002"), "", intent.StateSubmitting)
		_, err := intent.RerouteCharge(ctx, b.pool, intent.Reroute{TenantID: c.TenantID, ChargeID: c.ID, From: c.Provider,
			To: "backup", Actor: "test", Evidence: "a guess"})
		var conflict *intent.ConflictError
		require.ErrorAs(t, err, &conflict, "a charge in flight is not proven absent")
		require.Equal(t, intent.StateSubmitting, conflict.Current)

		p := b.accept(ctx, t, "reroute-00000000003")
		_, err = intent.RerouteCharge(ctx, b.pool, intent.Reroute{TenantID: p.TenantID, ChargeID: p.ID, From: "elsewhere",
			To: "backup", Actor: "test", Evidence: "stale"})
		require.ErrorAs(t, err, &conflict, "a reroute from an account the charge is not at")

		_, err = intent.RerouteCharge(ctx, b.pool, intent.Reroute{TenantID: p.TenantID, ChargeID: p.ID, From: p.Provider,
			To: "backup", Actor: "test"})
		require.Error(t, err, "no evidence, no reroute")
	})

	t.Run("TheDatabaseRefusesAnyOtherChangeOfProvider", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		pending := b.accept(ctx, t, "reroute-00000000004")
		sent := dbtest.Walk(t, b.pool, b.accept(ctx, t, "reroute-00000000005"), "", intent.StateSubmitting)
		for _, tc := range []struct {
			name, id, set string
		}{
			{"provider alone", pending.ID, "provider = 'backup'"},
			{"two steps at once", pending.ID, "provider = 'backup', route_seq = 2, provider_key = 'cf_' || id || '_2'"},
			{"same provider", pending.ID, "route_seq = 1, provider_key = 'cf_' || id || '_1'"},
			{"while submitting", sent.ID, "provider = 'backup', route_seq = 1, provider_key = 'cf_' || id || '_1'"},
		} {
			_, err := b.pool.Exec(ctx, `UPDATE charges SET `+tc.set+` WHERE id = $1`, tc.id)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, tc.name)
			require.Equal(t, "CF002", pgErr.Code, tc.name)
		}
		_, err := b.pool.Exec(ctx, `UPDATE charges SET provider = 'backup', route_seq = 1, provider_key = 'cf_' || id || '_7' WHERE id = $1`, pending.ID)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "a key that is not the route number's")
		require.Equal(t, "23514", pgErr.Code)
	})

	t.Run("ALateChargeAtAPreviousAccountIsRecorded", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.accept(ctx, t, "reroute-00000000006")
		ok, err := intent.RecordLateCharge(ctx, b.pool, c.TenantID, c.ID, "backup", "test", "never there")
		require.NoError(t, err)
		require.False(t, ok, "a charge that never left an account is not late there")

		_, err = intent.RerouteCharge(ctx, b.pool, intent.Reroute{TenantID: c.TenantID, ChargeID: c.ID, From: c.Provider,
			To: "backup", Actor: "test", Evidence: "never sent"})
		require.NoError(t, err)
		ok, err = intent.RecordLateCharge(ctx, b.pool, c.TenantID, c.ID, c.Provider, "test", "charged after all")
		require.NoError(t, err)
		require.True(t, ok)
		trail, err := intent.AuditTrail(ctx, b.pool, b.tenantID, c.ID)
		require.NoError(t, err)
		last := trail[len(trail)-1]
		require.Equal(t, intent.ActionLateCharge, last.Action)
		require.Equal(t, "charged_at:"+c.Provider, last.Reason)
		require.Equal(t, intent.StatePending, last.To, "nothing moved")
	})
}
