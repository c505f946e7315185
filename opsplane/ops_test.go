package opsplane_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// A merchant's API key never serves /ops/; a viewer reads but cannot act;
// a refusal changes nothing.
func TestOpsAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.InReview(t, "ops-auth-key-000001")
	before := b.Stored(t)
	resolveBody := `{"status": "failed", "evidence": "provider report has no such charge"}`

	routes := []struct{ method, path, body string }{
		{http.MethodGet, "/charges", ""},
		{http.MethodGet, "/charges/" + id, ""},
		{http.MethodPost, "/charges/" + id + "/reconcile", ""},
		{http.MethodPost, "/charges/" + id + "/resolve", resolveBody},
	}
	for _, r := range routes {
		for _, credential := range []string{"", b.TenantA.Key, b.TenantB.Key, "cfo_nonsense", b.Admin.Token + "x"} {
			apitest.RequireProblem(t, b.Ops(t, credential, r.method, r.path, r.body), http.StatusUnauthorized, api.CodeUnauthorized)
		}
	}
	for _, r := range routes[2:] {
		apitest.RequireProblem(t, b.Ops(t, b.Viewer.Token, r.method, r.path, r.body), http.StatusForbidden, api.CodeForbidden)
	}
	require.Equal(t, before, b.Stored(t), "no refusal changed anything")
	require.Equal(t, http.StatusOK, b.Ops(t, b.Viewer.Token, http.MethodGet, "/charges/"+id, "").Status)

	// And the old merchant-key operator routes are gone.
	for _, action := range []string{"resolve", "reconcile"} {
		resp := b.Request(t, http.MethodPost, "/v1/charges/"+id+"/"+action, resolveBody,
			"Authorization", "Bearer "+b.TenantA.Key, "Content-Type", "application/json")
		require.Contains(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, resp.Status, "body: %s", resp.Body)
	}
	require.Equal(t, before, b.Stored(t))
}

func TestOpsResolve(t *testing.T) {
	t.Parallel()

	// A resolve to succeeded is checked against the provider: it holds that
	// charge, with this amount and currency, under the charge's key.
	t.Run("ToSucceededVerifiedAndAudited", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.InReview(t, "resolve-key-00000001")
		providerID := b.ChargeAtProvider(t, id, 1000, "USD")

		resp := b.Resolve(t, b.Admin.Token, id, `{"status": "succeeded", "provider_charge_id": "`+providerID+`",
			"evidence": "Found it in the provider dashboard, captured 10:42 UTC"}`)
		require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
		var charge map[string]any
		require.NoError(t, json.Unmarshal(resp.Body, &charge))
		require.Equal(t, "succeeded", charge["status"])
		require.Equal(t, providerID, charge["provider_charge_id"])

		event := b.LastEvent(t, id)
		require.Equal(t, "needs_review", event["from"])
		require.Equal(t, "succeeded", event["to"])
		require.Equal(t, "operator:"+b.Admin.Name, event["actor"], "the operator is the token's")
		require.Equal(t, "Found it in the provider dashboard, captured 10:42 UTC", event["evidence"])

		again := b.Resolve(t, b.Admin.Token, id, `{"status": "failed", "evidence": "changed my mind entirely"}`)
		apitest.RequireProblem(t, again, http.StatusConflict, api.CodeChargeNotInReview)
	})

	// A forged resolve — a provider charge id the provider never made for
	// this key, or one about other money — is 409 and changes nothing.
	t.Run("ForgedIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		nothing := b.InReview(t, "resolve-key-00000002")
		otherMoney := b.InReview(t, "resolve-key-00000003")
		otherMoneyID := b.ChargeAtProvider(t, otherMoney, 999, "USD")
		real := b.InReview(t, "resolve-key-00000004")
		b.ChargeAtProvider(t, real, 1000, "USD")
		before, ledger := b.Stored(t), b.ledger(t)

		for _, tc := range []struct{ name, id, providerID string }{
			{"ProviderHasNothing", nothing, "py_made_up"},
			{"OtherMoney", otherMoney, otherMoneyID},
			{"OtherProviderID", real, "py_made_up"},
		} {
			resp := b.Resolve(t, b.Admin.Token, tc.id, `{"status": "succeeded", "provider_charge_id": "`+tc.providerID+`",
				"evidence": "trust me, it was definitely paid"}`)
			apitest.RequireProblem(t, resp, http.StatusConflict, api.CodeEvidenceMismatch)
			require.Equal(t, before, b.Stored(t), "%s changed nothing", tc.name)
			require.Equal(t, "needs_review", b.LastEvent(t, tc.id)["to"], tc.name)
		}
		require.Equal(t, ledger, b.ledger(t), "no provider charge was made")

		// Failed or a new attempt while the provider holds a success: refused.
		for _, status := range []string{"failed", "pending"} {
			resp := b.Resolve(t, b.Admin.Token, real, `{"status": "`+status+`", "evidence": "customer says it was not charged"}`)
			apitest.RequireProblem(t, resp, http.StatusConflict, api.CodeEvidenceMismatch)
		}
		require.Equal(t, before, b.Stored(t))
	})

	t.Run("ToPendingQueuesAnAttempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.InReview(t, "resolve-key-00000005")
		require.Equal(t, 1, b.JobsFor(t, id))

		resp := b.Resolve(t, b.Admin.Token, id, `{"status": "pending", "evidence": "Provider support confirmed no charge exists for this key"}`)
		require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
		require.Equal(t, 2, b.JobsFor(t, id), "a new charge.submit job, in the same transaction")
	})

	// Past the provider's key window a new attempt could be charged twice:
	// an operator cannot send it again, only settle it.
	t.Run("ToPendingAfterTheKeyWindowIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.InReview(t, "resolve-key-00000006")
		_, err := b.Pool.Exec(context.Background(), `UPDATE charges SET first_attempt_at = now() - interval '23 hours 1 minute' WHERE id = $1`, id)
		require.NoError(t, err)
		before := b.Stored(t)

		resp := b.Resolve(t, b.Admin.Token, id, `{"status": "pending", "evidence": "Provider support confirmed no charge exists for this key"}`)
		apitest.RequireProblem(t, resp, http.StatusConflict, api.CodeKeyWindowPassed)
		require.Equal(t, before, b.Stored(t))
		require.Equal(t, 1, b.JobsFor(t, id), "no new attempt")

		resp = b.Resolve(t, b.Admin.Token, id, `{"status": "failed", "failure_code": "not_charged", "evidence": "Provider report for the day has no charge for this reference"}`)
		require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
		require.Contains(t, string(resp.Body), `"failure_code":"not_charged"`)
	})

	// A provider that cannot answer settles nothing: 503, and the charge
	// stays in review.
	t.Run("ProviderDown", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.InReview(t, "resolve-key-00000007")
		require.NoError(t, fakepsp.SetFaults(context.Background(), b.psp.URL, fakepsp.Schedule{Seed: 1,
			Rules: []fakepsp.Rule{{On: fakepsp.OnLookup, Fault: fakepsp.FaultUnavailable, P: 1}}}))
		before := b.Stored(t)
		resp := b.Resolve(t, b.Admin.Token, id, `{"status": "failed", "evidence": "Provider report for the day has no charge"}`)
		p := apitest.RequireProblem(t, resp, http.StatusServiceUnavailable, api.CodeProviderUnavailable)
		require.NotEmpty(t, resp.Header.Get("Retry-After"))
		require.NotContains(t, p["detail"], b.psp.URL)
		require.Equal(t, before, b.Stored(t))
	})

	// Every refusal changes nothing: no move, no event, no job.
	t.Run("Refusals", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		review := b.InReview(t, "resolve-key-00000008")
		pending := b.NewCharge(t, b.TenantA, "resolve-key-00000009")
		before := b.Stored(t)

		const evidence = `"evidence": "checked the provider dashboard"`
		for _, tt := range []struct {
			name, id, body string
			status         int
			code           api.Code
			field          string
		}{
			{"NotInReview", pending, `{"status": "failed", ` + evidence + `}`, 409, api.CodeChargeNotInReview, ""},
			{"NoSuchCharge", "ch_" + strings.Repeat("0", 26), `{"status": "failed", ` + evidence + `}`, 404, api.CodeNotFound, ""},
			{"MalformedID", "ch_nope", `{"status": "failed", ` + evidence + `}`, 404, api.CodeNotFound, ""},
			{"BadStatus", review, `{"status": "unknown", ` + evidence + `}`, 400, api.CodeInvalidField, "status"},
			{"NoEvidence", review, `{"status": "failed"}`, 400, api.CodeMissingField, "evidence"},
			{"NoStatus", review, `{` + evidence + `}`, 400, api.CodeMissingField, "status"},
			{"ShortEvidence", review, `{"status": "failed", "evidence": "ok"}`, 400, api.CodeInvalidField, "evidence"},
			{"OperatorIsNotABodyField", review, `{"status": "failed", "operator": "mallory", ` + evidence + `}`, 400, api.CodeUnknownField, "operator"},
			{"SucceededWithoutProviderID", review, `{"status": "succeeded", ` + evidence + `}`, 400, api.CodeMissingField, "provider_charge_id"},
			{"ProviderIDOnFailed", review, `{"status": "failed", "provider_charge_id": "py_1", ` + evidence + `}`, 400, api.CodeInvalidField, "provider_charge_id"},
			{"UnknownField", review, `{"status": "failed", "note": "x", ` + evidence + `}`, 400, api.CodeUnknownField, "note"},
			{"CardInEvidence", review, `{"status": "failed", "evidence": "customer card 4242 4242 4242 4242"}`, 400, api.CodeCardNumberDetected, "evidence"},
			{"DuplicateMember", review, `{"status": "failed", "status": "succeeded", ` + evidence + `}`, 400, api.CodeDuplicateMember, "status"},
		} {
			resp := b.Resolve(t, b.Admin.Token, tt.id, tt.body)
			p := apitest.RequireProblem(t, resp, tt.status, tt.code)
			if tt.field != "" {
				require.Equal(t, tt.field, p["field"], tt.name)
			}
			require.Equal(t, before, b.Stored(t), "%s changed nothing", tt.name)
		}
		require.Equal(t, "needs_review", b.LastEvent(t, review)["to"])
	})
}

// A forced lookup is audited, and spaced from the last lookup so that a
// loop of requests cannot hammer the provider.
func TestOpsReconcile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.NewCharge(t, b.TenantA, "reconcile-key-000001")
	reconcile := func() response { return b.Ops(t, b.Admin.Token, http.MethodPost, "/charges/"+id+"/reconcile", "") }

	apitest.RequireProblem(t, reconcile(), http.StatusConflict, api.CodeChargeNotUnknown)

	b.Walk(t, b.TenantA, id, intent.StateSubmitting, intent.StateUnknown)
	_, err := b.Pool.Exec(ctx, `UPDATE charges SET next_check_at = now() + interval '1 hour' WHERE id = $1`, id)
	require.NoError(t, err)
	events := b.Stored(t).Events

	resp := reconcile()
	require.Equal(t, http.StatusAccepted, resp.Status, "body: %s", resp.Body)
	var due bool
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT next_check_at <= now() FROM charges WHERE id = $1`, id).Scan(&due))
	require.True(t, due, "the reconciler's next tick takes it")
	event := b.LastEvent(t, id)
	require.Equal(t, "reconcile_requested", event["action"])
	require.Equal(t, "operator:"+b.Admin.Name, event["actor"])
	require.Nil(t, event["from"])
	require.Equal(t, "unknown", event["to"], "the state it stayed in")
	require.Equal(t, events+1, b.Stored(t).Events)

	// Again at once: too soon, with how long to wait, and nothing written.
	again := reconcile()
	apitest.RequireProblem(t, again, http.StatusTooManyRequests, api.CodeReconcileTooSoon)
	wait, err := strconv.Atoi(again.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, wait >= 1 && wait <= 30, "Retry-After %d", wait)
	require.Equal(t, events+1, b.Stored(t).Events)

	// The reconciler's own lookup counts too.
	_, err = b.Pool.Exec(ctx, `UPDATE charges SET forced_check_at = now() - interval '1 hour', last_lookup_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
	apitest.RequireProblem(t, reconcile(), http.StatusTooManyRequests, api.CodeReconcileTooSoon)

	// Past the floor it is allowed again.
	_, err = b.Pool.Exec(ctx, `UPDATE charges SET last_lookup_at = now() - interval '1 hour' WHERE id = $1`, id)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, reconcile().Status)

	apitest.RequireProblem(t, b.Ops(t, b.Admin.Token, http.MethodPost, "/charges/ch_"+strings.Repeat("0", 26)+"/reconcile", ""),
		http.StatusNotFound, api.CodeNotFound)
}

// Operators list every tenant's charges, or one tenant's, by state.
func TestOpsList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.InReview(t, "ops-list-key-000001")
	other := b.NewCharge(t, b.TenantB, "ops-list-key-000002")

	list := func(query string) []map[string]any {
		resp := b.Ops(t, b.Viewer.Token, http.MethodGet, "/charges"+query, "")
		require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
		var page struct {
			Data []map[string]any `json:"data"`
		}
		require.NoError(t, json.Unmarshal(resp.Body, &page))
		return page.Data
	}
	require.Len(t, list(""), 2)
	review := list("?status=needs_review")
	require.Len(t, review, 1)
	require.Equal(t, a, review[0]["id"])
	require.Equal(t, b.TenantA.ID, review[0]["tenant_id"])
	require.Equal(t, "lookup_unavailable", review[0]["review_reason"])
	onlyB := list("?tenant=" + b.TenantB.ID)
	require.Len(t, onlyB, 1)
	require.Equal(t, other, onlyB[0]["id"])
	apitest.RequireProblem(t, b.Ops(t, b.Viewer.Token, http.MethodGet, "/charges?tenant=nope", ""), http.StatusBadRequest, api.CodeInvalidParameter)

	// A merchant cannot use ?tenant= to read another tenant.
	apitest.RequireProblem(t, b.Get(t, b.TenantA, "/v1/charges?tenant="+b.TenantB.ID), http.StatusBadRequest, api.CodeInvalidParameter)
}
