package resource_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/resource"
)

// Stored 201 bodies are replayed as written, so a charge's new fields
// come after every field it had: a body stored before them is a prefix of
// the same charge's body now, but for its end.
func TestChargeFieldsAreAppended(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	body, err := json.Marshal(resource.ChargeOf(intent.Charge{ID: "ch_1", State: intent.StatePending, Amount: 1000, Currency: "USD",
		PaymentMethod: "pm_card_visa", CreatedAt: at, UpdatedAt: at, CaptureLater: true}))
	require.NoError(t, err)
	before, after, found := strings.Cut(string(body), `"amount_refunded":0,`)
	require.True(t, found, "%s", body)
	require.True(t, strings.HasPrefix(before, `{"id":"ch_1","status":"pending","amount":1000,`), "%s", body)
	require.Equal(t, `"capture":false,"amount_captured":0}`, after)
}

// What a charge took is its amount once it succeeded when captured at
// once, what its capture took when captured later, and otherwise nothing.
func TestAmountCaptured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		charge intent.Charge
		want   int64
	}{
		{"captured at once, pending", intent.Charge{State: intent.StatePending, Amount: 1000}, 0},
		{"captured at once, succeeded", intent.Charge{State: intent.StateSucceeded, Amount: 1000}, 1000},
		{"captured at once, failed", intent.Charge{State: intent.StateFailed, Amount: 1000}, 0},
		{"held", intent.Charge{State: intent.StateRequiresCapture, Amount: 1000, CaptureLater: true}, 0},
		{"captured later, in part", intent.Charge{State: intent.StateSucceeded, Amount: 1000, CaptureLater: true, AmountCaptured: 600}, 600},
		{"released", intent.Charge{State: intent.StateCanceled, Amount: 1000, CaptureLater: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, resource.AmountCaptured(tc.charge))
			view := resource.ChargeOf(tc.charge)
			require.Equal(t, tc.want, view.AmountCaptured)
			require.Equal(t, !tc.charge.CaptureLater, view.Capture)
		})
	}
}

// A capture's or cancel's event carries the operation's resource; a
// charge's and a refund's, theirs.
func TestEventOfEachKind(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for kind, want := range map[intent.Kind]any{
		intent.KindCharge: resource.Charge{}, "": resource.Charge{}, intent.KindRefund: resource.Refund{},
		intent.KindCapture: resource.Operation{}, intent.KindCancel: resource.Operation{},
	} {
		data := resource.EventOf("evt_1", "x", at, intent.Charge{Kind: kind, ID: "x_1", ParentID: "ch_1"}).Data
		require.IsType(t, want, data, kind)
		if op, ok := data.(resource.Operation); ok {
			require.Equal(t, []any{kind, "ch_1"}, []any{op.Object, op.Charge})
		}
	}
	body, err := json.Marshal(resource.OperationOf(intent.Charge{ID: "cp_1", Kind: intent.KindCapture, ParentID: "ch_1", Amount: 600,
		Currency: "USD", State: intent.StatePending, CreatedAt: at, UpdatedAt: at}))
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"cp_1","object":"capture","charge":"ch_1","amount":600,"currency":"USD","status":"pending",
		"failure_code":null,"attempts":0,"created_at":"2025-01-02T03:04:05Z","updated_at":"2025-01-02T03:04:05Z","review_reason":null}`, string(body))
	require.True(t, strings.HasPrefix(string(body), `{"id":"cp_1","object":"capture","charge":"ch_1",`), "the contract's order: %s", body)
}
