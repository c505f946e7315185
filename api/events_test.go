package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/apitest"
)

// GET /v1/events: one event per settling move, newest first, each carrying
// the object exactly as the API shows it at that moment.
func TestEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	charge := b.succeededCharge(t, b.TenantA, 1000)
	chargeBody := b.Get(t, b.TenantA, "/v1/charges/"+charge).Body
	declined := b.NewCharge(t, b.TenantA, "events-declined-key-1")
	b.settle(t, b.TenantA, declined, intent.StatePending, intent.StateFailed)
	b.succeededCharge(t, b.TenantB, 700)

	list := apitest.Decode(t, b.Get(t, b.TenantA, "/v1/events"))
	data := list["data"].([]any)
	require.Len(t, data, 2, "tenant A's two settling moves, not B's")
	require.Equal(t, false, list["has_more"])
	newest, oldest := data[0].(map[string]any), data[1].(map[string]any)
	require.Equal(t, "charge.failed", newest["type"])
	require.Equal(t, "charge.succeeded", oldest["type"])

	var object map[string]any
	require.NoError(t, json.Unmarshal(chargeBody, &object))
	require.Equal(t, object, oldest["data"], "the event's object is the charge as GET /v1/charges/{id} showed it")

	one := b.Get(t, b.TenantA, "/v1/events/"+oldest["id"].(string))
	require.Equal(t, http.StatusOK, one.Status)
	require.Equal(t, oldest, apitest.Decode(t, one))
	apitest.RequireProblem(t, b.Get(t, b.TenantB, "/v1/events/"+oldest["id"].(string)), http.StatusNotFound, api.CodeNotFound)
	apitest.RequireProblem(t, b.Get(t, b.TenantA, "/v1/events/evt_nope"), http.StatusNotFound, api.CodeNotFound)

	failed := apitest.Decode(t, b.Get(t, b.TenantA, "/v1/events?type=charge.failed"))["data"].([]any)
	require.Len(t, failed, 1)
	page := apitest.Decode(t, b.Get(t, b.TenantA, "/v1/events?limit=1"))
	require.Equal(t, true, page["has_more"])
	next := apitest.Decode(t, b.Get(t, b.TenantA, "/v1/events?limit=1&starting_after="+page["data"].([]any)[0].(map[string]any)["id"].(string)))
	require.Equal(t, oldest["id"], next["data"].([]any)[0].(map[string]any)["id"])

	// A refund's event carries the refund object.
	refund := b.Refund(t, b.URL, b.TenantA, "events-refund-key-001", `{"charge": "`+charge+`", "amount": 300, "reason": "duplicate", "metadata": {"ticket": "T-9"}}`)
	refundID := apitest.Decode(t, refund)["id"].(string)
	b.settle(t, b.TenantA, refundID, intent.StatePending, intent.StateSubmitting, intent.StateSucceeded)
	var refundObject map[string]any
	require.NoError(t, json.Unmarshal(b.Get(t, b.TenantA, "/v1/refunds/"+refundID).Body, &refundObject))
	refunds := apitest.Decode(t, b.Get(t, b.TenantA, "/v1/events?type=refund.succeeded"))["data"].([]any)
	require.Len(t, refunds, 1)
	require.Equal(t, refundObject, refunds[0].(map[string]any)["data"])

	for _, query := range []string{"?type=charge.pending", "?limit=0", "?starting_after=ch_x", "?color=red", "?limit=1&limit=2"} {
		apitest.RequireProblem(t, b.Get(t, b.TenantA, "/v1/events"+query), http.StatusBadRequest, api.CodeInvalidParameter)
	}
}
