package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"chargeflow/api"
	"chargeflow/intent"
)

// walk moves a charge along the given states, as the worker and the
// reconciler would.
func (b *testBundle) walk(t *testing.T, tt testTenant, id string, states ...intent.State) {
	t.Helper()
	ctx := context.Background()
	from := intent.StatePending
	for _, to := range states {
		m := intent.Move{TenantID: tt.ID, ChargeID: id, From: from, To: to, Actor: "test", Reason: "test", CountAttempt: to == intent.StateSubmitting}
		if to == intent.StateNeedsReview {
			m.ReviewReason = "lookup_unavailable"
		}
		_, err := intent.MoveCharge(ctx, b.pool, m)
		require.NoError(t, err)
		from = to
	}
}

func (b *testBundle) newCharge(t *testing.T, tt testTenant, key string) string {
	t.Helper()
	resp := b.post(t, tt, key, validBody)
	require.Equal(t, http.StatusCreated, resp.status)
	return strings.TrimPrefix(resp.header.Get("Location"), "/v1/charges/")
}

func (b *testBundle) operator(t *testing.T, tt testTenant, id, action, body string) response {
	t.Helper()
	return b.request(t, http.MethodPost, "/v1/charges/"+id+"/"+action, body,
		"Authorization", "Bearer "+tt.Key, "Content-Type", "application/json")
}

func (b *testBundle) lastEvent(t *testing.T, tt testTenant, id string) map[string]any {
	t.Helper()
	resp := b.get(t, tt, "/v1/charges/"+id+"/events")
	require.Equal(t, http.StatusOK, resp.status)
	var trail struct {
		Data []map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &trail))
	return trail.Data[len(trail.Data)-1]
}

func TestResolve(t *testing.T) {
	t.Parallel()

	t.Run("ToSucceededIsAudited", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.newCharge(t, b.tenantA, "resolve-key-00000001")
		b.walk(t, b.tenantA, id, intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)

		list := b.get(t, b.tenantA, "/v1/charges?status=needs_review")
		require.Contains(t, string(list.body), id, "operators list charges by state")
		require.Contains(t, string(list.body), `"review_reason":"lookup_unavailable"`)

		resp := b.operator(t, b.tenantA, id, "resolve", `{"status": "succeeded", "provider_charge_id": "py_123",
			"evidence": "Found py_123 in the provider dashboard, captured 10:42 UTC", "operator": "alice@example.com"}`)
		require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
		var charge map[string]any
		require.NoError(t, json.Unmarshal(resp.body, &charge))
		require.Equal(t, "succeeded", charge["status"])
		require.Equal(t, "py_123", charge["provider_charge_id"])

		event := b.lastEvent(t, b.tenantA, id)
		require.Equal(t, "needs_review", event["from"])
		require.Equal(t, "succeeded", event["to"])
		require.Equal(t, "operator:alice@example.com", event["actor"])
		require.Equal(t, "Found py_123 in the provider dashboard, captured 10:42 UTC", event["evidence"])

		// Resolving again is refused: it is no longer in review.
		again := b.operator(t, b.tenantA, id, "resolve", `{"status": "failed", "evidence": "changed my mind entirely", "operator": "bob"}`)
		requireProblem(t, again, http.StatusConflict, api.CodeChargeNotInReview)
	})

	t.Run("ToPendingQueuesAnAttempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.newCharge(t, b.tenantA, "resolve-key-00000002")
		b.walk(t, b.tenantA, id, intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)
		require.Equal(t, 1, b.jobsFor(t, id))

		resp := b.operator(t, b.tenantA, id, "resolve", `{"status": "pending",
			"evidence": "Provider support confirmed no charge exists for this key", "operator": "carol"}`)
		require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
		require.Equal(t, 2, b.jobsFor(t, id), "a new charge.submit job, in the same transaction")
	})

	t.Run("ToFailed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.newCharge(t, b.tenantA, "resolve-key-00000003")
		b.walk(t, b.tenantA, id, intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)

		resp := b.operator(t, b.tenantA, id, "resolve", `{"status": "failed", "failure_code": "not_charged",
			"evidence": "Provider report for the day has no charge for this reference", "operator": "dave"}`)
		require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
		require.Contains(t, string(resp.body), `"failure_code":"not_charged"`)
	})

	// Every refusal changes nothing: no move, no event, no job.
	t.Run("Refusals", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		review := b.newCharge(t, b.tenantA, "resolve-key-00000004")
		b.walk(t, b.tenantA, review, intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)
		pending := b.newCharge(t, b.tenantA, "resolve-key-00000005")
		before := b.stored(t)

		const evidence = `"evidence": "checked the provider dashboard", "operator": "erin"`
		for _, tt := range []struct {
			name, id, body string
			tenant         testTenant
			status         int
			code           api.Code
			field          string
		}{
			{"NotInReview", pending, `{"status": "failed", ` + evidence + `}`, b.tenantA, 409, api.CodeChargeNotInReview, ""},
			{"OtherTenant", review, `{"status": "failed", ` + evidence + `}`, b.tenantB, 404, api.CodeNotFound, ""},
			{"MalformedID", "ch_nope", `{"status": "failed", ` + evidence + `}`, b.tenantA, 404, api.CodeNotFound, ""},
			{"BadStatus", review, `{"status": "unknown", ` + evidence + `}`, b.tenantA, 400, api.CodeInvalidField, "status"},
			{"NoEvidence", review, `{"status": "failed", "operator": "erin"}`, b.tenantA, 400, api.CodeMissingField, "evidence"},
			{"ShortEvidence", review, `{"status": "failed", "evidence": "ok", "operator": "erin"}`, b.tenantA, 400, api.CodeInvalidField, "evidence"},
			{"NoOperator", review, `{"status": "failed", "evidence": "checked the provider dashboard"}`, b.tenantA, 400, api.CodeMissingField, "operator"},
			{"SucceededWithoutProviderID", review, `{"status": "succeeded", ` + evidence + `}`, b.tenantA, 400, api.CodeMissingField, "provider_charge_id"},
			{"ProviderIDOnFailed", review, `{"status": "failed", "provider_charge_id": "py_1", ` + evidence + `}`, b.tenantA, 400, api.CodeInvalidField, "provider_charge_id"},
			{"UnknownField", review, `{"status": "failed", "note": "x", ` + evidence + `}`, b.tenantA, 400, api.CodeUnknownField, "note"},
			{"CardInEvidence", review, `{"status": "failed", "evidence": "customer card 4242 4242 4242 4242", "operator": "erin"}`, b.tenantA, 400, api.CodeCardNumberDetected, "evidence"},
			{"DuplicateMember", review, `{"status": "failed", "status": "succeeded", ` + evidence + `}`, b.tenantA, 400, api.CodeDuplicateMember, "status"},
		} {
			resp := b.operator(t, tt.tenant, tt.id, "resolve", tt.body)
			p := requireProblem(t, resp, tt.status, tt.code)
			if tt.field != "" {
				require.Equal(t, tt.field, p["field"], tt.name)
			}
			require.Equal(t, before, b.stored(t), "%s changed nothing", tt.name)
		}
		require.Equal(t, "needs_review", b.lastEvent(t, b.tenantA, review)["to"])
		requireProblem(t, b.request(t, http.MethodPost, "/v1/charges/"+review+"/resolve", `{}`), http.StatusUnauthorized, api.CodeUnauthorized)
	})
}

func TestReconcileNow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.newCharge(t, b.tenantA, "reconcile-key-000001")

	requireProblem(t, b.operator(t, b.tenantA, id, "reconcile", ""), http.StatusConflict, api.CodeChargeNotUnknown)

	b.walk(t, b.tenantA, id, intent.StateSubmitting, intent.StateUnknown)
	_, err := b.pool.Exec(context.Background(), `UPDATE charges SET next_check_at = now() + interval '1 hour' WHERE id = $1`, id)
	require.NoError(t, err)
	requireProblem(t, b.operator(t, b.tenantB, id, "reconcile", ""), http.StatusNotFound, api.CodeNotFound)

	resp := b.operator(t, b.tenantA, id, "reconcile", "")
	require.Equal(t, http.StatusAccepted, resp.status, "body: %s", resp.body)
	var due bool
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT next_check_at <= now() FROM charges WHERE id = $1`, id).Scan(&due))
	require.True(t, due, "the reconciler's next tick takes it")
	requireProblem(t, b.operator(t, b.tenantA, "ch_"+strings.Repeat("0", 26), "reconcile", ""), http.StatusNotFound, api.CodeNotFound)
}
