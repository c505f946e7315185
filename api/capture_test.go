package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/route"
)

// capturing makes every provider of the API declare separate
// (Capabilities.SeparateCapture), whatever its adapter says.
func capturing(separate bool) func(*setupOpts) {
	return func(o *setupOpts) {
		o.API = func(c *api.Config) {
			c.Capabilities = func(_ context.Context, name string) (psp.Capabilities, error) {
				return psp.Capabilities{Name: name, SeparateCapture: separate}, nil
			}
		}
	}
}

// heldBody is a charge of amount USD to be captured later.
func heldBody(amount int64) string {
	return fmt.Sprintf(`{"amount": %d, "currency": "USD", "payment_method": "pm_card_visa", "capture": false}`, amount)
}

// heldCharge accepts a charge of amount USD to be captured later as
// tenant tt, and moves it as the worker would on the provider's
// authorization: held, requires_capture.
func (b *testBundle) heldCharge(t *testing.T, tt testTenant, key string, amount int64) string {
	t.Helper()
	resp := b.Post(t, tt, key, heldBody(amount))
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	id := apitest.Decode(t, resp)["id"].(string)
	b.Walk(t, tt, id, intent.StateSubmitting, intent.StateRequiresCapture)
	return id
}

// operate sends POST /v1/charges/{id}/capture or …/cancel (kind) as
// tenant tt to the API at baseURL, with an idempotency key (none when
// empty).
func (b *testBundle) operate(t *testing.T, baseURL string, tt testTenant, id string, kind intent.Kind, key, body string) response {
	t.Helper()
	headers := []string{"Authorization", "Bearer " + tt.Key, "Content-Type", "application/json"}
	if key != "" {
		headers = append(headers, "Idempotency-Key", key)
	}
	return apitest.Request(t, baseURL, http.MethodPost, "/v1/charges/"+id+"/"+string(kind), body, headers...)
}

// row reads a row of tenant tt as stored.
func (b *testBundle) row(t *testing.T, tt testTenant, id string) intent.Charge {
	t.Helper()
	c, err := intent.Get(context.Background(), b.Pool, tt.ID, id)
	require.NoError(t, err)
	return c
}

// "capture": false accepts a charge to be authorized now and captured
// later, through the batched accept statement and the one of a charge
// alone; true, or none, captures at once; anything else is refused.
func TestCreateChargeCaptureLater(t *testing.T) {
	t.Parallel()
	for name, batches := range map[string]int{"Batched": 0, "Alone": -1} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, capturing(true), func(o *setupOpts) {
				o.Server = func(sc *app.ServerConfig) { sc.Accept.Batches = batches }
			})
			resp := b.Post(t, b.TenantA, "capture-later-key-001", heldBody(1000))
			require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
			charge := apitest.Decode(t, resp)
			id := charge["id"].(string)
			require.Equal(t, []any{"pending", false, 0.0}, []any{charge["status"], charge["capture"], charge["amount_captured"]})
			require.True(t, strings.HasSuffix(string(resp.Body), `"amount_refunded":0,"capture":false,"amount_captured":0}`+"\n"),
				"the new fields come last: %s", resp.Body)
			require.True(t, b.row(t, b.TenantA, id).CaptureLater)
			require.Equal(t, 1, b.JobsFor(t, id))

			replay := b.Post(t, b.TenantA, "capture-later-key-001", heldBody(1000))
			require.Equal(t, http.StatusCreated, replay.Status)
			require.Equal(t, resp.Body, replay.Body)
			apitest.RequireProblem(t, b.Post(t, b.TenantA, "capture-later-key-001", apitest.ValidBody),
				http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)

			for key, body := range map[string]string{
				"capture-true-key-0001": `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "capture": true}`,
				"capture-none-key-0001": `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa"}`,
			} {
				resp := b.Post(t, b.TenantA, key, body)
				require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
				require.Equal(t, true, apitest.Decode(t, resp)["capture"])
				require.False(t, b.row(t, b.TenantA, apitest.Decode(t, resp)["id"].(string)).CaptureLater)
			}

			before := b.Stored(t)
			for i, value := range []string{`"false"`, `0`, `null`, `{}`} {
				p := apitest.RequireProblem(t, b.Post(t, b.TenantA, fmt.Sprintf("capture-bad-key-%04d", i),
					`{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "capture": `+value+`}`),
					http.StatusBadRequest, api.CodeInvalidField)
				require.Equal(t, "capture", p["field"])
			}
			require.Equal(t, before, b.Stored(t), "nothing stored")
		})
	}
}

// A charge to be captured later is refused, storing nothing and calling
// no provider, when the provider it would go to cannot hold it — but
// never the retry of one already accepted.
func TestCaptureNotSupported(t *testing.T) {
	t.Parallel()
	separate := true
	var mu sync.Mutex
	b := setup(t, func(o *setupOpts) {
		o.API = func(c *api.Config) {
			c.Capabilities = func(_ context.Context, name string) (psp.Capabilities, error) {
				mu.Lock()
				defer mu.Unlock()
				return psp.Capabilities{Name: name, SeparateCapture: separate}, nil
			}
		}
	})
	accepted := b.Post(t, b.TenantA, "capture-accepted-key1", heldBody(1000))
	require.Equal(t, http.StatusCreated, accepted.Status, "body: %s", accepted.Body)
	mu.Lock()
	separate = false
	mu.Unlock()

	before, calls := b.Stored(t), b.ledger(t)
	p := apitest.RequireProblem(t, b.Post(t, b.TenantA, "capture-refused-key01", heldBody(1000)),
		http.StatusUnprocessableEntity, api.CodeCaptureNotSupported)
	require.Equal(t, "capture", p["field"])
	require.Equal(t, before, b.Stored(t), "no charge, record, audit entry or job")
	require.Equal(t, calls, b.ledger(t), "no provider call")
	resp := b.Post(t, b.TenantA, "capture-at-once-key01", apitest.ValidBody)
	require.Equal(t, http.StatusCreated, resp.Status, "a charge captured at once goes on: %s", resp.Body)

	replay := b.Post(t, b.TenantA, "capture-accepted-key1", heldBody(1000))
	require.Equal(t, http.StatusCreated, replay.Status, "body: %s", replay.Body)
	require.Equal(t, accepted.Body, replay.Body, "an accepted request's retry is its answer")
}

// accounts is a registry of provider accounts by name, each declaring
// whether it captures separately.
type accounts map[string]bool

func (a accounts) Provider(_ context.Context, name string) (psp.Provider, error) {
	separate, ok := a[name]
	if !ok {
		return nil, fmt.Errorf("%w: no provider account %q", psp.ErrNoSuchProvider, name)
	}
	return declared{Provider: psp.NewClient(psp.Config{}), caps: psp.Capabilities{Name: name, SeparateCapture: separate}}, nil
}

func (a accounts) Names(context.Context) ([]string, error) { return nil, nil }

// declared is a provider with the capabilities it is declared with.
type declared struct {
	psp.Provider
	caps psp.Capabilities
}

func (d declared) Capabilities() psp.Capabilities { return d.caps }

// Without a registry of accounts, what the processes' own provider
// declares decides.
func TestCaptureLaterByTheProcessesProvider(t *testing.T) {
	t.Parallel()
	for _, separate := range []bool{true, false} {
		t.Run(fmt.Sprint("SeparateCapture=", separate), func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(o *setupOpts) {
				o.Server = func(sc *app.ServerConfig) {
					sc.Provider = declared{Provider: sc.Provider, caps: psp.Capabilities{Name: "fakepsp", SeparateCapture: separate}}
				}
			})
			resp := b.Post(t, b.TenantA, "own-provider-key-0001", heldBody(1000))
			if separate {
				require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
				return
			}
			apitest.RequireProblem(t, resp, http.StatusUnprocessableEntity, api.CodeCaptureNotSupported)
		})
	}
}

// The account a tenant's route sends a charge to decides whether it can be
// captured later, as the process's registry of providers knows it: one
// that cannot is 422 capture_not_supported, one the process cannot call
// 503 provider_unavailable; each stores nothing.
func TestCaptureLaterIsRouted(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) {
		o.Server = func(sc *app.ServerConfig) {
			sc.Routes = route.NewCache(sc.DB, time.Millisecond)
			sc.Providers = accounts{"fakepsp": true, "holds": true, "plain": false}
		}
	})
	ctx := context.Background()
	for _, name := range []string{"holds", "plain", "elsewhere"} {
		_, err := route.AddAccount(ctx, b.Pool, route.Account{Name: name, Kind: route.KindFake, Endpoint: b.psp.URL})
		require.NoError(t, err)
	}
	require.NoError(t, route.SetRoute(ctx, b.Pool, b.TenantA.ID, []route.Entry{
		{Account: "holds", Currencies: []string{"EUR"}},
		{Account: "plain", Currencies: []string{"USD"}},
		{Account: "elsewhere", Currencies: []string{"GBP"}},
	}))
	body := func(currency string, capture bool) string {
		return fmt.Sprintf(`{"amount": 1000, "currency": %q, "payment_method": "pm_card_visa", "capture": %t}`, currency, capture)
	}

	held := b.Post(t, b.TenantA, "routed-held-key-00001", body("EUR", false))
	require.Equal(t, http.StatusCreated, held.Status, "body: %s", held.Body)
	c := b.row(t, b.TenantA, apitest.Decode(t, held)["id"].(string))
	require.Equal(t, []any{"holds", true}, []any{c.Provider, c.CaptureLater})
	unrouted := b.Post(t, b.TenantB, "routed-own-key-000001", heldBody(1000))
	require.Equal(t, http.StatusCreated, unrouted.Status, "the processes' own provider, for a tenant without a route: %s", unrouted.Body)

	before, calls := b.Stored(t), b.ledger(t)
	apitest.RequireProblem(t, b.Post(t, b.TenantA, "routed-plain-key-0001", body("USD", false)),
		http.StatusUnprocessableEntity, api.CodeCaptureNotSupported)
	p := apitest.RequireProblem(t, b.Post(t, b.TenantA, "routed-away-key-00001", body("GBP", false)),
		http.StatusServiceUnavailable, api.CodeProviderUnavailable)
	require.Contains(t, p["detail"], "nothing was stored")
	require.Equal(t, before, b.Stored(t), "no charge, record, audit entry or job")
	require.Equal(t, calls, b.ledger(t), "no provider call")

	for i, currency := range []string{"USD", "GBP"} {
		resp := b.Post(t, b.TenantA, fmt.Sprintf("routed-at-once-key-%02d", i), body(currency, true))
		require.Equal(t, http.StatusCreated, resp.Status, "a charge captured at once asks nothing of its account: %s", resp.Body)
	}
}

// A capture takes some or all of a held charge, a cancel releases it,
// each a row of its own under the charges' idempotency contract; the
// charge then shows what was captured, and refunds apply to that.
func TestCaptureAndCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, capturing(true))
	charge := b.heldCharge(t, b.TenantA, "held-charge-key-00001", 1000)
	other := b.heldCharge(t, b.TenantA, "held-charge-key-00002", 1000)

	resp := b.operate(t, b.URL, b.TenantA, charge, intent.KindCapture, "capture-key-000000001", `{"amount": 600}`)
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	capture := apitest.Decode(t, resp)
	id := capture["id"].(string)
	require.True(t, strings.HasPrefix(id, "cp_"), id)
	require.Equal(t, "/v1/captures/"+id, resp.Header.Get("Location"))
	require.Equal(t, map[string]any{"id": id, "object": "capture", "charge": charge, "amount": 600.0, "currency": "USD",
		"status": "pending", "failure_code": nil, "attempts": 0.0, "created_at": capture["created_at"],
		"updated_at": capture["updated_at"], "review_reason": nil}, capture)
	require.Equal(t, 1, b.JobsFor(t, id), "the capture's job, written with it")
	op := b.row(t, b.TenantA, id)
	require.Equal(t, []any{intent.KindCapture, charge, "fakepsp", intent.ProviderKeyFor(id)},
		[]any{op.Kind, op.ParentID, op.Provider, op.ProviderKey})
	require.Equal(t, id, b.row(t, b.TenantA, charge).OpInFlight)

	// The contract of charges: a replay byte for byte; another body, or
	// the same body for another charge or route, is another request.
	replay := b.operate(t, b.URL, b.TenantA, charge, intent.KindCapture, "capture-key-000000001", `{"amount": 600}`)
	require.Equal(t, http.StatusCreated, replay.Status)
	require.Equal(t, resp.Body, replay.Body)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "/v1/captures/"+id, replay.Header.Get("Location"))
	before := b.Stored(t)
	for _, reused := range []response{
		b.operate(t, b.URL, b.TenantA, charge, intent.KindCapture, "capture-key-000000001", `{"amount": 601}`),
		b.operate(t, b.URL, b.TenantA, charge, intent.KindCapture, "capture-key-000000001", `{}`),
		b.operate(t, b.URL, b.TenantA, other, intent.KindCapture, "capture-key-000000001", `{"amount": 600}`),
		b.operate(t, b.URL, b.TenantA, charge, intent.KindCancel, "capture-key-000000001", `{}`),
		b.Post(t, b.TenantA, "capture-key-000000001", apitest.ValidBody),
	} {
		apitest.RequireProblem(t, reused, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	}
	require.Equal(t, before, b.Stored(t))

	got := b.Get(t, b.TenantA, "/v1/captures/"+id)
	require.Equal(t, http.StatusOK, got.Status)
	require.Equal(t, capture, apitest.Decode(t, got))
	apitest.RequireProblem(t, b.Get(t, b.TenantB, "/v1/captures/"+id), http.StatusNotFound, api.CodeNotFound)
	apitest.RequireProblem(t, b.Get(t, b.TenantA, "/v1/cancels/"+id), http.StatusNotFound, api.CodeNotFound)
	apitest.RequireProblem(t, b.Get(t, b.TenantA, "/v1/captures/"+charge), http.StatusNotFound, api.CodeNotFound)

	// Captured: the charge shows what the capture took; it is captured
	// once, never twice, nor canceled after.
	b.Walk(t, b.TenantA, id, intent.StateSubmitting, intent.StateSucceeded)
	view := apitest.Decode(t, b.Get(t, b.TenantA, "/v1/charges/"+charge))
	require.Equal(t, []any{"succeeded", 1000.0, false, 600.0}, []any{view["status"], view["amount"], view["capture"], view["amount_captured"]})
	require.Equal(t, "succeeded", apitest.Decode(t, b.Get(t, b.TenantA, "/v1/captures/"+id))["status"])
	for i, kind := range []intent.Kind{intent.KindCapture, intent.KindCancel} {
		p := apitest.RequireProblem(t, b.operate(t, b.URL, b.TenantA, charge, kind, fmt.Sprintf("after-capture-key-%03d", i), `{}`),
			http.StatusConflict, api.CodeChargeNotCapturable)
		require.Contains(t, p["detail"], "this one is succeeded")
	}

	// Refunds apply to what was captured: 600 of the 1,000 authorized.
	p := apitest.RequireProblem(t, b.Refund(t, b.URL, b.TenantA, "refund-captured-key-1", fmt.Sprintf(`{"charge": %q, "amount": 601}`, charge)),
		http.StatusConflict, api.CodeRefundExceedsCharge)
	require.Contains(t, p["detail"], "at most what its capture took, 600 USD")
	rest := b.Refund(t, b.URL, b.TenantA, "refund-captured-key-2", fmt.Sprintf(`{"charge": %q}`, charge))
	require.Equal(t, http.StatusCreated, rest.Status, "body: %s", rest.Body)
	require.EqualValues(t, 600, apitest.Decode(t, rest)["amount"], "no amount: what the capture took")
	apitest.RequireProblem(t, b.Refund(t, b.URL, b.TenantA, "refund-captured-key-3", fmt.Sprintf(`{"charge": %q}`, charge)),
		http.StatusConflict, api.CodeRefundExceedsCharge)

	// A capture without an amount takes all that was authorized.
	all := b.operate(t, b.URL, b.TenantA, other, intent.KindCapture, "capture-all-key-00001", `{}`)
	require.Equal(t, http.StatusCreated, all.Status, "body: %s", all.Body)
	require.EqualValues(t, 1000, apitest.Decode(t, all)["amount"])

	// A cancel releases the charge: nothing was captured, nothing can be
	// refunded.
	released := b.heldCharge(t, b.TenantA, "held-charge-key-00003", 700)
	apitest.RequireProblem(t, b.Refund(t, b.URL, b.TenantA, "refund-held-key-00001", fmt.Sprintf(`{"charge": %q}`, released)),
		http.StatusConflict, api.CodeChargeNotRefundable)
	cancel := b.operate(t, b.URL, b.TenantA, released, intent.KindCancel, "cancel-key-0000000001", `{}`)
	require.Equal(t, http.StatusCreated, cancel.Status, "body: %s", cancel.Body)
	cx := apitest.Decode(t, cancel)
	cancelID := cx["id"].(string)
	require.True(t, strings.HasPrefix(cancelID, "cx_"), cancelID)
	require.Equal(t, "/v1/cancels/"+cancelID, cancel.Header.Get("Location"))
	require.Equal(t, []any{"cancel", released, 700.0, "pending"}, []any{cx["object"], cx["charge"], cx["amount"], cx["status"]},
		"a cancel is of the authorized amount")
	cancelReplay := b.operate(t, b.URL, b.TenantA, released, intent.KindCancel, "cancel-key-0000000001", `{}`)
	require.Equal(t, cancel.Body, cancelReplay.Body)
	require.Equal(t, "/v1/cancels/"+cancelID, cancelReplay.Header.Get("Location"))
	b.Walk(t, b.TenantA, cancelID, intent.StateSubmitting, intent.StateSucceeded)
	view = apitest.Decode(t, b.Get(t, b.TenantA, "/v1/charges/"+released))
	require.Equal(t, []any{"canceled", false, 0.0}, []any{view["status"], view["capture"], view["amount_captured"]})
	require.Equal(t, "succeeded", apitest.Decode(t, b.Get(t, b.TenantA, "/v1/cancels/"+cancelID))["status"])
	apitest.RequireProblem(t, b.Refund(t, b.URL, b.TenantA, "refund-released-key-1", fmt.Sprintf(`{"charge": %q}`, released)),
		http.StatusConflict, api.CodeChargeNotRefundable)
	apitest.RequireProblem(t, b.Get(t, b.TenantB, "/v1/cancels/"+cancelID), http.StatusNotFound, api.CodeNotFound)
}

// Every refusal of a capture or a cancel answers its code and stores
// nothing: no row, no claim on the charge, no idempotency record, no
// audit entry, no job, and so no provider call.
func TestCaptureRejections(t *testing.T) {
	t.Parallel()
	b := setup(t, capturing(true))
	held := b.heldCharge(t, b.TenantA, "rejections-held-key01", 1000)
	busy := b.heldCharge(t, b.TenantA, "rejections-busy-key01", 1000)
	inFlight := b.operate(t, b.URL, b.TenantA, busy, intent.KindCapture, "rejections-first-op01", `{}`)
	require.Equal(t, http.StatusCreated, inFlight.Status, "body: %s", inFlight.Body)
	pendingResp := b.Post(t, b.TenantA, "rejections-pending-k1", heldBody(1000))
	require.Equal(t, http.StatusCreated, pendingResp.Status)
	pending := apitest.Decode(t, pendingResp)["id"].(string)
	atOnce := b.succeededCharge(t, b.TenantA, 1000)
	declined := b.NewCharge(t, b.TenantA, "rejections-declined-1")
	b.settle(t, b.TenantA, declined, intent.StatePending, intent.StateFailed)
	other := b.heldCharge(t, b.TenantB, "rejections-other-key1", 1000)
	watched := []string{held, busy, pending, atOnce, declined}
	rows := func() []intent.Charge {
		var cs []intent.Charge
		for _, id := range watched {
			cs = append(cs, b.row(t, b.TenantA, id))
		}
		return cs
	}

	type rejection struct {
		name           string
		kind           intent.Kind
		charge, key    string
		body           string
		status         int
		code           api.Code
		field, details string
	}
	var cases []rejection
	for _, kind := range []intent.Kind{intent.KindCapture, intent.KindCancel} {
		cases = append(cases, []rejection{
			{"no key", kind, held, "", `{}`, 400, api.CodeIdempotencyKeyMissing, "", ""},
			{"not JSON", kind, held, "rejection-key-000001", `{`, 400, api.CodeInvalidJSON, "", ""},
			{"no body", kind, held, "rejection-key-000002", ``, 400, api.CodeInvalidJSON, "", ""},
			{"not an object", kind, held, "rejection-key-000003", `[]`, 400, api.CodeInvalidJSON, "", ""},
			{"unknown field", kind, held, "rejection-key-000004", `{"metadata": {"order": "A-1"}}`, 400, api.CodeUnknownField, "metadata", ""},
			{"card number", kind, held, "rejection-key-000005", `{"note": "4242 4242 4242 4242"}`, 400, api.CodeCardNumberDetected, "note", ""},
			{"malformed charge id", kind, "ch_nope", "rejection-key-000006", `{}`, 404, api.CodeNotFound, "", ""},
			{"a refund's id", kind, "re_0000000000000000000000000a", "rejection-key-000007", `{}`, 404, api.CodeNotFound, "", ""},
			{"unknown charge", kind, "ch_0000000000000000000000000a", "rejection-key-000008", `{}`, 404, api.CodeNotFound, "", ""},
			{"another tenant's charge", kind, other, "rejection-key-000009", `{}`, 404, api.CodeNotFound, "", ""},
			{"not yet authorized", kind, pending, "rejection-key-000010", `{}`, 409, api.CodeChargeNotCapturable, "", "this one is pending"},
			{"captured at once", kind, atOnce, "rejection-key-000011", `{}`, 409, api.CodeChargeNotCapturable, "", "captured at once"},
			{"declined", kind, declined, "rejection-key-000012", `{}`, 409, api.CodeChargeNotCapturable, "", "it is failed"},
			{"another operation in flight", kind, busy, "rejection-key-000013", `{}`, 409, api.CodeOperationInProgress, "", ""},
		}...)
	}
	cases = append(cases, []rejection{
		{"an amount to cancel", intent.KindCancel, held, "rejection-key-000020", `{"amount": 500}`, 400, api.CodeUnknownField, "amount", ""},
		{"zero amount", intent.KindCapture, held, "rejection-key-000021", `{"amount": 0}`, 400, api.CodeInvalidField, "amount", ""},
		{"fractional amount", intent.KindCapture, held, "rejection-key-000022", `{"amount": 1.5}`, 400, api.CodeInvalidField, "amount", ""},
		{"amount as a string", intent.KindCapture, held, "rejection-key-000023", `{"amount": "500"}`, 400, api.CodeInvalidField, "amount", ""},
		{"beyond the authorization", intent.KindCapture, held, "rejection-key-000024", `{"amount": 1001}`, 422, api.CodeCaptureExceedsAuthorization, "amount", "at most the 1000 authorized, in the minor unit of USD"},
		{"beyond any amount", intent.KindCapture, held, "rejection-key-000025", `{"amount": 99999999999999999999999}`, 422, api.CodeCaptureExceedsAuthorization, "amount", ""},
	}...)
	for _, tc := range cases {
		t.Run(string(tc.kind)+" "+tc.name, func(t *testing.T) {
			before, calls, charges := b.Stored(t), b.ledger(t), rows()
			p := apitest.RequireProblem(t, b.operate(t, b.URL, b.TenantA, tc.charge, tc.kind, tc.key, tc.body), tc.status, tc.code)
			if tc.field != "" {
				require.Equal(t, tc.field, p["field"])
			}
			require.Contains(t, p["detail"], tc.details)
			require.NotContains(t, fmt.Sprint(p), "4242", "a card number is never echoed")
			require.Equal(t, before, b.Stored(t), "nothing stored")
			require.Equal(t, charges, rows(), "no charge claimed or moved")
			require.Equal(t, calls, b.ledger(t), "no provider call")
		})
	}

	// A refused key is free: the same key with a request that is accepted.
	resp := b.operate(t, b.URL, b.TenantA, held, intent.KindCapture, "rejection-key-000024", `{"amount": 1000}`)
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
}

// Captures and cancels of one held charge racing from many clients,
// through two API processes: exactly one is accepted, every other is 409
// operation_in_progress, and the charge is claimed by the one accepted.
func TestCapturesRacingCancels(t *testing.T) {
	t.Parallel()
	b := setup(t, capturing(true))
	urls := []string{b.URL, b.Serve(t, b.Config)}
	for round := range 3 {
		charge := b.heldCharge(t, b.TenantA, fmt.Sprintf("racing-held-key-%04d", round), 1000)
		answers := make([]response, 8)
		var wg sync.WaitGroup
		for i := range answers {
			wg.Go(func() {
				kind := map[bool]intent.Kind{true: intent.KindCapture, false: intent.KindCancel}[i%2 == 0]
				answers[i] = b.operate(t, urls[i%2], b.TenantA, charge, kind, fmt.Sprintf("racing-op-key-%02d-%04d", round, i), `{}`)
			})
		}
		wg.Wait()
		require.Equal(t, map[string]int{"201 ": 1, "409 operation_in_progress": 7}, countAnswers(t, answers))
		var accepted string
		for _, resp := range answers {
			if resp.Status == http.StatusCreated {
				accepted = apitest.Decode(t, resp)["id"].(string)
			}
		}
		require.Equal(t, accepted, b.row(t, b.TenantA, charge).OpInFlight)
		var ops, jobs int
		require.NoError(t, b.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM charges WHERE parent_id = $1),
			(SELECT count(*) FROM river_job j JOIN charges c ON c.id = j.args->>'charge_id' WHERE c.parent_id = $1)`, charge).Scan(&ops, &jobs))
		require.Equal(t, []int{1, 1}, []int{ops, jobs})
	}
}

// A retry of a capture whose first attempt commits between the retry's
// replay check and its read of the charge finds the charge claimed by
// that attempt: it must answer the first attempt's capture, byte for
// byte, not operation_in_progress — a merchant told that would not know
// its own capture was taken.
func TestCaptureRetryRacingItsFirstAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, capturing(true))
	charge := b.heldCharge(t, b.TenantA, "capture-race-held-001", 1000)
	const key = "capture-race-key-0001"

	b.requireRetryRacingItsFirstAttempt(t, charge, func(baseURL string) response {
		return b.operate(t, baseURL, b.TenantA, charge, intent.KindCapture, key, `{}`)
	})
}

// A charge captured later and its capture are told as events that carry
// the objects exactly as the API shows them, and endpoints subscribe to
// the new types by name.
func TestCaptureEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) {
		capturing(true)(o)
		capture := o.API
		o.API = func(c *api.Config) {
			capture(c)
			c.WebhooksAllowPrivate = true
		}
	})
	endpoint := b.createEndpoint(t, b.TenantA, "capture-hooks-key-001",
		`{"url": "http://127.0.0.1:9/hooks", "events": ["charge.authorized", "charge.captured", "capture.failed"]}`)
	require.Equal(t, http.StatusCreated, endpoint.Status, "body: %s", endpoint.Body)

	charge := b.heldCharge(t, b.TenantA, "capture-events-held-1", 1000)
	authorized := b.Get(t, b.TenantA, "/v1/charges/"+charge).Body
	refused := b.operate(t, b.URL, b.TenantA, charge, intent.KindCapture, "capture-events-op-001", `{}`)
	refusedID := apitest.Decode(t, refused)["id"].(string)
	b.Walk(t, b.TenantA, refusedID, intent.StateSubmitting, intent.StateFailed)
	taken := b.operate(t, b.URL, b.TenantA, charge, intent.KindCapture, "capture-events-op-002", `{"amount": 400}`)
	takenID := apitest.Decode(t, taken)["id"].(string)
	b.Walk(t, b.TenantA, takenID, intent.StateSubmitting, intent.StateSucceeded)

	for typ, object := range map[string][]byte{
		"charge.authorized": authorized,
		"capture.failed":    b.Get(t, b.TenantA, "/v1/captures/"+refusedID).Body,
		"charge.captured":   b.Get(t, b.TenantA, "/v1/charges/"+charge).Body,
	} {
		events := apitest.Decode(t, b.Get(t, b.TenantA, "/v1/events?type="+typ))["data"].([]any)
		require.Len(t, events, 1, typ)
		var want map[string]any
		require.NoError(t, json.Unmarshal(object, &want))
		require.Equal(t, want, events[0].(map[string]any)["data"], "%s carries the object as the API showed it", typ)
	}
	require.EqualValues(t, 400, apitest.Decode(t, b.Get(t, b.TenantA, "/v1/charges/"+charge))["amount_captured"])
	require.Equal(t, 3, b.jobsOfKind(t, "webhook.deliver"), "a delivery of each event the endpoint subscribes to")
}
