package stripe_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripego "github.com/stripe/stripe-go/v82"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/psp/psptest"
	pspstripe "github.com/chargeflow/chargeflow/psp/stripe"
)

const testKey = "sk_test_canary_key"

// visaRequest is a valid charge request; tests change what they care about.
func visaRequest(key string) psp.ChargeRequest {
	return psp.ChargeRequest{Key: key, Amount: 1000, Currency: "USD", PaymentMethod: "pm_canary_visa", Reference: "ch_1", Tag: "tn_1"}
}

// intentJSON is a PaymentIntent as Stripe serialises it.
func intentJSON(id, status, reference string, created int64) string {
	return fmt.Sprintf(`{"id":%q,"object":"payment_intent","amount":1000,"currency":"usd","status":%q,`+
		`"created":%d,"payment_method":"pm_canary_visa","client_secret":"%s_secret_x","metadata":{"chargeflow_charge":%q}}`,
		id, status, created, id, reference)
}

// declineJSON is Stripe's 402 for a declined card: the error carries the
// PaymentIntent, left in requires_payment_method.
func declineJSON(declineCode string) string {
	pi := `{"id":"pi_1","object":"payment_intent","amount":1000,"currency":"usd","status":"requires_payment_method",` +
		`"metadata":{"chargeflow_charge":"ch_1"},"last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"` + declineCode + `"}}`
	return `{"error":{"type":"card_error","code":"card_declined","decline_code":"` + declineCode +
		`","message":"Your card has insufficient funds.","payment_intent":` + pi + `}}`
}

// errorJSON is a Stripe error body.
func errorJSON(typ, code, message string) string {
	return fmt.Sprintf(`{"error":{"type":%q,"code":%q,"message":%q,"request_log_url":"https://dashboard.stripe.com/logs/req_1"}}`, typ, code, message)
}

// requirePSPError checks that err is a *psp.Error of kind and reason and
// carries neither the payment method nor the API key.
func requirePSPError(t *testing.T, err error, kind error, reason string) *psp.Error {
	t.Helper()
	require.ErrorIs(t, err, kind)
	var pspErr *psp.Error
	require.ErrorAs(t, err, &pspErr)
	require.Equal(t, reason, pspErr.Reason, "error: %v", err)
	require.NotContains(t, err.Error(), "pm_canary")
	require.NotContains(t, err.Error(), "canary_key")
	return pspErr
}

// stripeServer is a loopback server that answers Stripe-shaped JSON and
// keeps every request it was sent.
type stripeServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request
	forms    []url.Values
}

func startStripeServer(t *testing.T, handler http.HandlerFunc) *stripeServer {
	t.Helper()
	s := &stripeServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		s.mu.Lock()
		s.requests = append(s.requests, r)
		s.forms = append(s.forms, r.Form)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", "req_"+strconv.Itoa(s.count()))
		handler(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *stripeServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

func (s *stripeServer) request(i int) (*http.Request, url.Values) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[i], s.forms[i]
}

// answer writes status and body.
func answer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// hang answers nothing until the client hangs up (or five seconds pass).
func hang(_ http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(5 * time.Second):
	}
}

// answeringAdapter starts a server answering every request with handler,
// and an adapter for it whose timeout is long enough for stripe-go's
// retry, after its half-second backoff, to reach the server if it were
// on, or short when handler hangs.
func answeringAdapter(t *testing.T, handler http.HandlerFunc, hangs bool) (*stripeServer, *pspstripe.Adapter) {
	t.Helper()
	server := startStripeServer(t, handler)
	timeout := 3 * time.Second
	if hangs {
		timeout = 300 * time.Millisecond
	}
	return server, newAdapter(server.URL, func(c *pspstripe.Config) { c.Timeout = timeout })
}

func newAdapter(serverURL string, edit ...func(*pspstripe.Config)) *pspstripe.Adapter {
	cfg := pspstripe.Config{BaseURL: serverURL, APIKey: testKey, Timeout: 2 * time.Second}
	for _, e := range edit {
		e(&cfg)
	}
	return pspstripe.New(cfg)
}

func TestChargeSendsOnePaymentIntent(t *testing.T) {
	t.Parallel()

	server := startStripeServer(t, answer(200, intentJSON("pi_1", "succeeded", "ch_1", 1)))
	charge, err := newAdapter(server.URL).Charge(t.Context(), visaRequest("pk_1"))
	require.NoError(t, err)
	require.Equal(t, psp.Charge{ID: "pi_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "USD", Reference: "ch_1"}, charge)

	require.Equal(t, 1, server.count())
	req, form := server.request(0)
	require.Equal(t, http.MethodPost, req.Method)
	require.Equal(t, "/v1/payment_intents", req.URL.Path)
	require.Equal(t, "pk_1", req.Header.Get("Idempotency-Key"))
	require.Equal(t, "Bearer "+testKey, req.Header.Get("Authorization"))
	require.Equal(t, "1000", form.Get("amount"))
	require.Equal(t, "usd", form.Get("currency"), "Stripe's currencies are lower case")
	require.Equal(t, "pm_canary_visa", form.Get("payment_method"))
	require.Equal(t, "true", form.Get("confirm"))
	require.Equal(t, "ch_1", form.Get("metadata[chargeflow_charge]"))
	require.Equal(t, "tn_1", form.Get("metadata[chargeflow_tenant]"), "the tenant tag")
	require.Equal(t, "never", form.Get("automatic_payment_methods[allow_redirects]"))
}

// Each answer is classified as classify's table says, through the real
// stripe-go, and exactly one request is made for each charge although
// stripe-go, left to itself, retries 409s, 5xx, lock timeouts and
// connection errors.
func TestChargeClassifiesStripesAnswers(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		handler http.HandlerFunc
		// charge is the expected value; kind and reason the expected error.
		charge psp.Charge
		kind   error
		reason string
		code   string
		id     string
	}{
		{name: "success", handler: answer(200, intentJSON("pi_1", "succeeded", "ch_1", 1)),
			charge: psp.Charge{ID: "pi_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "USD", Reference: "ch_1"}},
		{name: "402 decline is a value", handler: answer(402, declineJSON("insufficient_funds")),
			charge: psp.Charge{ID: "pi_1", Status: psp.StatusFailed, Amount: 1000, Currency: "USD", Reference: "ch_1", DeclineCode: "insufficient_funds"}},
		{name: "processing names the intent", handler: answer(200, intentJSON("pi_7", "processing", "ch_1", 1)),
			kind: psp.ErrUnknownOutcome, reason: "intent_processing", id: "pi_7"},
		{name: "400 idempotency_error", handler: answer(400, errorJSON("idempotency_error", "", "Keys for idempotent requests can only be used with the same parameters they were first used with.")),
			kind: psp.ErrUnknownOutcome, reason: "idempotency_key_reused"},
		{name: "409 key in use", handler: answer(409, errorJSON("invalid_request_error", "idempotency_key_in_use", "There is currently another in-progress request using this Idempotent Key.")),
			kind: psp.ErrUnknownOutcome, reason: "idempotency_key_in_use", code: "idempotency_key_in_use"},
		{name: "429 rate limited", handler: answer(429, errorJSON("invalid_request_error", "rate_limit", "Too many requests.")),
			kind: psp.ErrNotApplied, reason: "rate_limited", code: "rate_limit"},
		{name: "429 lock timeout", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Stripe-Should-Retry", "true")
			answer(429, errorJSON("invalid_request_error", "lock_timeout", "This object cannot be accessed right now."))(w, nil)
		}, kind: psp.ErrNotApplied, reason: "lock_timeout", code: "lock_timeout"},
		{name: "400 invalid request", handler: answer(400, errorJSON("invalid_request_error", "resource_missing", "No such PaymentMethod: 'pm_canary_visa'")),
			kind: psp.ErrNotApplied, reason: "invalid_request", code: "resource_missing"},
		{name: "400 replayed", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Idempotent-Replayed", "true")
			answer(400, errorJSON("invalid_request_error", "parameter_invalid_integer", "Invalid integer."))(w, nil)
		}, kind: psp.ErrUnknownOutcome, reason: "replayed_error", code: "parameter_invalid_integer"},
		{name: "401", handler: answer(401, errorJSON("invalid_request_error", "", "Invalid API Key provided: sk_test_****_key")),
			kind: psp.ErrNotApplied, reason: "authentication_failed"},
		{name: "500", handler: answer(500, errorJSON("api_error", "", "Something went wrong on Stripe's end.")),
			kind: psp.ErrUnknownOutcome, reason: "status_500"},
		{name: "503 with should-retry", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Stripe-Should-Retry", "true")
			answer(503, errorJSON("api_error", "", "Unavailable."))(w, nil)
		}, kind: psp.ErrUnknownOutcome, reason: "status_503"},
		{name: "malformed JSON", handler: answer(200, intentJSON("pi_1", "succeeded", "ch_1", 1)[:60]),
			kind: psp.ErrUnknownOutcome, reason: "malformed_body"},
		{name: "502 from a proxy", handler: answer(502, "<html>bad gateway</html>"),
			kind: psp.ErrUnknownOutcome, reason: "status_502"},
		{name: "hang past the timeout", handler: hang, kind: psp.ErrUnknownOutcome, reason: "timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			server, adapter := answeringAdapter(t, tc.handler, tc.reason == "timeout")
			charge, err := adapter.Charge(t.Context(), visaRequest("pk_"+tc.name))
			require.Equal(t, 1, server.count(), "exactly one request: stripe-go's retries are off")
			if tc.kind == nil {
				require.NoError(t, err)
				require.Equal(t, tc.charge, charge)
				return
			}
			pspErr := requirePSPError(t, err, tc.kind, tc.reason)
			require.Equal(t, tc.code, pspErr.ProviderCode)
			require.Equal(t, tc.id, pspErr.ProviderID)
			require.NotContains(t, err.Error(), "dashboard.stripe.com", "not stripe-go's JSON of the error")
		})
	}
}

func TestChargeToAClosedPortIsNotApplied(t *testing.T) {
	t.Parallel()

	_, err := newAdapter(psptest.ClosedURL(t)).Charge(t.Context(), visaRequest("pk_1"))
	requirePSPError(t, err, psp.ErrNotApplied, "connection_refused")
}

func TestChargeRefusesWhatCannotBeSent(t *testing.T) {
	t.Parallel()

	server := startStripeServer(t, answer(200, intentJSON("pi_1", "succeeded", "ch_1", 1)))
	for name, tc := range map[string]struct {
		adapter *pspstripe.Adapter
		key     string
	}{
		"no API key":   {pspstripe.New(pspstripe.Config{BaseURL: server.URL}), "pk_1"},
		"no key":       {newAdapter(server.URL), " "},
		"too long key": {newAdapter(server.URL), string(make([]byte, 256))},
	} {
		_, err := tc.adapter.Charge(t.Context(), visaRequest(tc.key))
		requirePSPError(t, err, psp.ErrNotApplied, "invalid_request")
		require.Zero(t, server.count(), name)
	}
}

func TestChargeMakesExactlyOneAttempt(t *testing.T) {
	t.Parallel()

	t.Run("stripe-go alone re-sends on a lost keep-alive connection", func(t *testing.T) {
		t.Parallel()

		// The control: with its retries off, stripe-go still sets GetBody,
		// and net/http re-sends the POST on a new connection.
		server := psptest.StartLosingServer(t, []byte(intentJSON("pi_1", "succeeded", "ch_1", 1)))
		transport := &http.Transport{}
		t.Cleanup(transport.CloseIdleConnections)
		client := stripego.NewClient(testKey, stripego.WithBackends(stripego.NewBackendsWithConfig(&stripego.BackendConfig{
			URL: stripego.String(server.URL()), HTTPClient: &http.Client{Transport: transport},
			MaxNetworkRetries: stripego.Int64(0), LeveledLogger: &stripego.LeveledLogger{Level: stripego.LevelNull},
		})))
		create := func(key string) error {
			params := &stripego.PaymentIntentCreateParams{Amount: stripego.Int64(1000), Currency: stripego.String("usd")}
			params.IdempotencyKey = stripego.String(key)
			_, err := client.V1PaymentIntents.Create(t.Context(), params)
			return err
		}
		require.NoError(t, create("pk_first"))
		require.NoError(t, create("pk_second"), "the transport hid the lost connection by re-sending")
		require.Equal(t, int32(3), server.Requests.Load())
	})

	t.Run("the adapter sends once and reports an unknown outcome", func(t *testing.T) {
		t.Parallel()

		server := psptest.StartLosingServer(t, []byte(intentJSON("pi_1", "succeeded", "ch_1", 1)))
		transport := &http.Transport{}
		t.Cleanup(transport.CloseIdleConnections)
		adapter := newAdapter(server.URL(), func(c *pspstripe.Config) { c.HTTPClient = &http.Client{Transport: transport} })

		_, err := adapter.Charge(t.Context(), visaRequest("pk_first"))
		require.NoError(t, err)
		_, err = adapter.Charge(t.Context(), visaRequest("pk_second"))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
		require.Equal(t, int32(2), server.Requests.Load(), "the lost POST was not sent again")
		require.Equal(t, int32(1), server.Conns.Load())
	})

	t.Run("the default transport sends once too", func(t *testing.T) {
		t.Parallel()

		server := psptest.StartLosingServer(t, []byte(intentJSON("pi_1", "succeeded", "ch_1", 1)))
		adapter := newAdapter(server.URL())
		_, err := adapter.Charge(t.Context(), visaRequest("pk_first"))
		require.NoError(t, err)
		_, err = adapter.Charge(t.Context(), visaRequest("pk_second"))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
		require.Equal(t, int32(2), server.Requests.Load())
	})
}

func TestFindByProviderID(t *testing.T) {
	t.Parallel()

	server := startStripeServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/payment_intents/pi_1":
			answer(200, intentJSON("pi_1", "succeeded", "ch_1", 1))(w, r)
		case "/v1/payment_intents/pi_declined":
			answer(200, `{"id":"pi_declined","object":"payment_intent","amount":1000,"currency":"usd","status":"requires_payment_method",`+
				`"metadata":{"chargeflow_charge":"ch_1"},"last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"stolen_card"}}`)(w, r)
		default:
			answer(404, errorJSON("invalid_request_error", "resource_missing", "No such payment_intent: 'pi_x'"))(w, r)
		}
	})
	adapter := newAdapter(server.URL)
	// The reference and the times are there too: the id wins.
	q := psp.LookupRequest{Key: "pk_1", Reference: "ch_1", FirstSent: time.Now(), LastSent: time.Now()}

	q.ProviderID = "pi_1"
	charge, err := adapter.Find(t.Context(), q)
	require.NoError(t, err)
	require.Equal(t, psp.Charge{ID: "pi_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "USD", Reference: "ch_1"}, charge)

	q.ProviderID = "pi_declined"
	charge, err = adapter.Find(t.Context(), q)
	require.NoError(t, err)
	require.Equal(t, psp.StatusFailed, charge.Status)
	require.Equal(t, "stolen_card", charge.DeclineCode)

	q.ProviderID = "pi_missing"
	_, err = adapter.Find(t.Context(), q)
	require.Equal(t, psp.ErrNotFound, err)

	require.Equal(t, 3, server.count())
	for i := range 3 {
		req, _ := server.request(i)
		require.Equal(t, http.MethodGet, req.Method)
	}
}

// readServer serves Stripe's reads over intents (newest first, each
// created at created[i] and filed under references[i]) as Stripe does: the
// list with its created filter, limit and starting_after; a retrieve by
// id; and a search on the reference that sees only the intents indexed
// reports, each in a stale copy whose status is still "processing". fail
// answers a 500 to the request-th request (1-based) it reports.
type readServer struct {
	intents, references []string
	created             []int64
	indexed             func(i int) bool
	fail                func(request int) bool
}

func (rs readServer) start(t *testing.T) *stripeServer {
	t.Helper()
	var requests atomic.Int32
	id := func(i int) string { return fmt.Sprintf("pi_%d", i) }
	page := func(object, path string, bodies []string, hasMore bool) string {
		return fmt.Sprintf(`{"object":%q,"url":%q,"has_more":%t,"data":[%s]}`, object, path, hasMore, strings.Join(bodies, ","))
	}
	return startStripeServer(t, func(w http.ResponseWriter, r *http.Request) {
		if rs.fail != nil && rs.fail(int(requests.Add(1))) {
			answer(500, errorJSON("api_error", "", "Something went wrong."))(w, r)
			return
		}
		q := r.URL.Query()
		switch path := r.URL.Path; path {
		case "/v1/payment_intents/search":
			var hits []string
			for i := range rs.intents {
				if rs.indexed != nil && rs.indexed(i) && q.Get("query") == "metadata['chargeflow_charge']:'"+rs.references[i]+"'" {
					hits = append(hits, intentJSON(id(i), "processing", rs.references[i], rs.created[i]))
				}
			}
			answer(200, page("search_result", path, hits, false))(w, r)
		case "/v1/payment_intents":
			gte, _ := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
			lte, _ := strconv.ParseInt(q.Get("created[lte]"), 10, 64)
			limit, _ := strconv.Atoi(q.Get("limit"))
			var ids, bodies []string
			for i, body := range rs.intents {
				if rs.created[i] >= gte && rs.created[i] <= lte {
					ids, bodies = append(ids, id(i)), append(bodies, body)
				}
			}
			start := 0
			if after := q.Get("starting_after"); after != "" {
				start = slices.Index(ids, after) + 1
			}
			end := min(start+limit, len(bodies))
			answer(200, page("list", path, bodies[start:end], end < len(bodies)))(w, r)
		default:
			for i := range rs.intents {
				if path == "/v1/payment_intents/"+id(i) && rs.intents[i] != "" {
					answer(200, rs.intents[i])(w, r)
					return
				}
			}
			answer(404, errorJSON("invalid_request_error", "resource_missing", "No such payment_intent"))(w, r)
		}
	})
}

func TestFindByReference(t *testing.T) {
	t.Parallel()

	sent := time.Unix(1_800_000_000, 500_000_000)
	skew := 10 * time.Minute
	timeout := 2 * time.Second // newAdapter's
	// Seven intents created around the send, newest first; pi_5 is ours.
	// pi_0 was created after the window and pi_6 before it.
	created := []int64{sent.Add(timeout + skew + 5*time.Second).Unix(), sent.Add(time.Minute).Unix(), sent.Unix() + 1, sent.Unix(), sent.Unix(), sent.Unix() - 1, sent.Add(-skew - time.Second).Unix()}
	references := []string{"ch_1", "ch_a", "ch_b", "ch_c", "ch_d", "ch_1", "ch_1"}
	intents := func(status map[int]string) []string {
		out := make([]string, len(created))
		for i := range created {
			out[i] = intentJSON(fmt.Sprintf("pi_%d", i), cmpOr(status[i], "succeeded"), references[i], created[i])
		}
		return out
	}
	unindexed := func(status map[int]string) readServer {
		return readServer{intents: intents(status), references: references, created: created}
	}
	q := psp.LookupRequest{Key: "pk_1", Reference: "ch_1", FirstSent: sent, LastSent: sent}
	small := func(c *pspstripe.Config) { c.PageSize, c.ClockSkew = 2, skew }
	succeeded := psp.Charge{ID: "pi_5", Status: psp.StatusSucceeded, Amount: 1000, Currency: "USD", Reference: "ch_1"}

	t.Run("searched first, then found on the third page of the window", func(t *testing.T) {
		t.Parallel()

		server := unindexed(nil).start(t)
		charge, err := newAdapter(server.URL, small).Find(t.Context(), q)
		require.NoError(t, err)
		require.Equal(t, succeeded, charge)

		require.Equal(t, 4, server.count(), "the search, then every page of the window and no more")
		req, form := server.request(0)
		require.Equal(t, "/v1/payment_intents/search", req.URL.Path)
		require.Equal(t, "metadata['chargeflow_charge']:'ch_1'", form.Get("query"))
		var after []string
		for i := 1; i < 4; i++ {
			req, form := server.request(i)
			require.Equal(t, "/v1/payment_intents", req.URL.Path)
			require.Equal(t, strconv.FormatInt(sent.Add(-skew).Unix(), 10), form.Get("created[gte]"), "a send cannot be executed before it is sent")
			require.Equal(t, strconv.FormatInt(sent.Add(timeout+skew).Unix()+1, 10), form.Get("created[lte]"), "the last send may execute until its timeout; rounded outwards")
			require.Equal(t, "2", form.Get("limit"))
			after = append(after, form.Get("starting_after"))
		}
		require.Equal(t, []string{"", "pi_2", "pi_4"}, after)
	})

	t.Run("the apply delay widens the window after the last send", func(t *testing.T) {
		t.Parallel()

		server := unindexed(nil).start(t)
		delayed := func(c *pspstripe.Config) { c.ApplyDelay = 6 * time.Second }
		_, err := newAdapter(server.URL, small, delayed).Find(t.Context(), q)
		requirePSPError(t, err, psp.ErrUnknownOutcome, "multiple_matches") // pi_0 is in the wider window
		_, form := server.request(1)
		require.Equal(t, strconv.FormatInt(sent.Add(timeout+6*time.Second+skew).Unix()+1, 10), form.Get("created[lte]"))
	})

	t.Run("each send has its own window, newest first", func(t *testing.T) {
		t.Parallel()

		server := unindexed(nil).start(t)
		later := sent.Add(time.Hour) // a rescued job's send, long after the first
		spread := q
		spread.LastSent, spread.Sends = later, []time.Time{sent, later}
		charge, err := newAdapter(server.URL, small).Find(t.Context(), spread)
		require.NoError(t, err)
		require.Equal(t, succeeded, charge)

		require.Equal(t, 5, server.count(), "the search, the later window's one page, the first window's three")
		windows := map[string]string{}
		for i := 1; i < 5; i++ {
			_, form := server.request(i)
			windows[form.Get("created[gte]")] = form.Get("created[lte]")
		}
		require.Equal(t, map[string]string{
			strconv.FormatInt(later.Add(-skew).Unix(), 10): strconv.FormatInt(later.Add(timeout+skew).Unix()+1, 10),
			strconv.FormatInt(sent.Add(-skew).Unix(), 10):  strconv.FormatInt(sent.Add(timeout+skew).Unix()+1, 10),
		}, windows, "two windows, not the hour between them")
		_, form := server.request(1)
		require.Equal(t, strconv.FormatInt(later.Add(-skew).Unix(), 10), form.Get("created[gte]"), "the newest window first")
	})

	t.Run("overlapping windows are one, so no intent is listed twice", func(t *testing.T) {
		t.Parallel()

		server := unindexed(nil).start(t)
		near := q
		near.LastSent = sent.Add(time.Second)
		near.Sends = []time.Time{sent, sent.Add(time.Second)}
		charge, err := newAdapter(server.URL, small).Find(t.Context(), near)
		require.NoError(t, err, "pi_5 in both windows would be two matches")
		require.Equal(t, succeeded, charge)
		require.Equal(t, 4, server.count())
		_, form := server.request(1)
		require.Equal(t, strconv.FormatInt(sent.Add(-skew).Unix(), 10), form.Get("created[gte]"))
		require.Equal(t, strconv.FormatInt(sent.Add(time.Second+timeout+skew).Unix()+1, 10), form.Get("created[lte]"))
	})

	t.Run("a search hit is retrieved by id, no scan", func(t *testing.T) {
		t.Parallel()

		rs := unindexed(nil)
		rs.indexed = func(i int) bool { return i == 5 }
		server := rs.start(t)
		charge, err := newAdapter(server.URL, small).Find(t.Context(), q)
		require.NoError(t, err)
		require.Equal(t, succeeded, charge, "the retrieve's state, not the search's stale copy")
		require.Equal(t, 2, server.count())
		req, _ := server.request(1)
		require.Equal(t, "/v1/payment_intents/pi_5", req.URL.Path)
	})

	t.Run("a search hit that is not ours by id proves nothing", func(t *testing.T) {
		t.Parallel()

		for body, reason := range map[string]string{
			intentJSON("pi_5", "succeeded", "ch_other", created[5]): "reference_mismatch",
			"": "search_hit_missing",
		} {
			rs := unindexed(nil)
			rs.indexed = func(i int) bool { return i == 5 }
			rs.intents[5] = body
			server := rs.start(t)
			_, err := newAdapter(server.URL, small).Find(t.Context(), q)
			pspErr := requirePSPError(t, err, psp.ErrUnknownOutcome, reason)
			require.Equal(t, "pi_5", pspErr.ProviderID)
			require.Equal(t, 2, server.count(), "no scan either")
		}
	})

	t.Run("two search hits are never a pick", func(t *testing.T) {
		t.Parallel()

		rs := unindexed(nil)
		rs.indexed = func(int) bool { return true }
		server := rs.start(t)
		_, err := newAdapter(server.URL, small).Find(t.Context(), q)
		requirePSPError(t, err, psp.ErrUnknownOutcome, "multiple_matches")
		require.Equal(t, 1, server.count(), "no scan after the search proved a double charge")
	})

	t.Run("a failed search proves nothing and scans nothing", func(t *testing.T) {
		t.Parallel()

		rs := unindexed(nil)
		rs.fail = func(request int) bool { return request == 1 }
		server := rs.start(t)
		_, err := newAdapter(server.URL, small).Find(t.Context(), q)
		requirePSPError(t, err, psp.ErrUnknownOutcome, "status_500")
		require.Equal(t, 1, server.count())
	})

	t.Run("the search query escapes the reference", func(t *testing.T) {
		t.Parallel()

		server := unindexed(nil).start(t)
		odd := q
		odd.Reference = `ch_'x\`
		_, err := newAdapter(server.URL, small).Find(t.Context(), odd)
		require.Equal(t, psp.ErrNotFound, err)
		_, form := server.request(0)
		require.Equal(t, `metadata['chargeflow_charge']:'ch_\'x\\'`, form.Get("query"))
	})

	t.Run("not found after a complete scan", func(t *testing.T) {
		t.Parallel()

		server := unindexed(nil).start(t)
		notOurs := q
		notOurs.Reference = "ch_nobody"
		_, err := newAdapter(server.URL, small).Find(t.Context(), notOurs)
		require.Equal(t, psp.ErrNotFound, err)
		require.Equal(t, 4, server.count())
	})

	t.Run("a non-final match names the intent", func(t *testing.T) {
		t.Parallel()

		server := unindexed(map[int]string{5: "requires_action"}).start(t)
		_, err := newAdapter(server.URL, small).Find(t.Context(), q)
		pspErr := requirePSPError(t, err, psp.ErrUnknownOutcome, "intent_requires_action")
		require.Equal(t, "pi_5", pspErr.ProviderID)
	})

	t.Run("two matches in the window are never a pick", func(t *testing.T) {
		t.Parallel()

		rs := unindexed(nil)
		rs.references = slices.Clone(references)
		rs.references[2] = "ch_1"
		for i := range created {
			rs.intents[i] = intentJSON(fmt.Sprintf("pi_%d", i), "succeeded", rs.references[i], created[i])
		}
		server := rs.start(t)
		_, err := newAdapter(server.URL, small).Find(t.Context(), q)
		pspErr := requirePSPError(t, err, psp.ErrUnknownOutcome, "multiple_matches")
		require.Empty(t, pspErr.ProviderID)
	})

	t.Run("a failed page proves nothing", func(t *testing.T) {
		t.Parallel()

		rs := unindexed(nil)
		rs.fail = func(request int) bool { return request == 3 }
		server := rs.start(t)
		_, err := newAdapter(server.URL, small).Find(t.Context(), q)
		requirePSPError(t, err, psp.ErrUnknownOutcome, "status_500")
		require.Equal(t, 3, server.count(), "the search, a page, and the failed page")
	})

	t.Run("a scan longer than allowed proves nothing", func(t *testing.T) {
		t.Parallel()

		server := unindexed(nil).start(t)
		_, err := newAdapter(server.URL, small, func(c *pspstripe.Config) { c.MaxPages = 2 }).Find(t.Context(), q)
		requirePSPError(t, err, psp.ErrUnknownOutcome, "scan_too_long")
		require.Equal(t, 3, server.count())
	})

	t.Run("a page that is not a list proves nothing", func(t *testing.T) {
		t.Parallel()

		server := startStripeServer(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/payment_intents/search" {
				answer(200, `{"object":"search_result","has_more":false,"data":[]}`)(w, r)
				return
			}
			answer(200, `{}`)(w, r)
		})
		_, err := newAdapter(server.URL).Find(t.Context(), q)
		requirePSPError(t, err, psp.ErrUnknownOutcome, "malformed_body")
	})

	t.Run("a search answer that is not a search result proves nothing", func(t *testing.T) {
		t.Parallel()

		server := startStripeServer(t, answer(200, `{"object":"list","has_more":false,"data":[]}`))
		_, err := newAdapter(server.URL).Find(t.Context(), q)
		requirePSPError(t, err, psp.ErrUnknownOutcome, "malformed_body")
		require.Equal(t, 1, server.count())
	})

	t.Run("a lookup without times or reference is refused", func(t *testing.T) {
		t.Parallel()

		server := startStripeServer(t, answer(200, `{}`))
		adapter := newAdapter(server.URL)
		_, err := adapter.Find(t.Context(), psp.LookupRequest{Reference: "ch_1"})
		requirePSPError(t, err, psp.ErrUnknownOutcome, "invalid_request")
		_, err = adapter.Find(t.Context(), psp.LookupRequest{FirstSent: sent, LastSent: sent})
		requirePSPError(t, err, psp.ErrUnknownOutcome, "invalid_request")
		require.Zero(t, server.count())
	})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestCapabilities(t *testing.T) {
	t.Parallel()

	adapter := newAdapter("http://127.0.0.1:1", func(c *pspstripe.Config) { c.Timeout = 7 * time.Second })
	require.Equal(t, psp.Capabilities{
		Name: "stripe", KeyWindow: 24 * time.Hour, Lookup: psp.LookupByReference, Consistency: psp.Strong, ByProviderID: true, Refunds: true,
		Notifications: true, SeparateCapture: true, HoldWindow: 7 * 24 * time.Hour,
	}, adapter.Capabilities())
	require.Equal(t, 7*time.Second, adapter.Timeout())
	require.Equal(t, psp.DefaultTimeout, pspstripe.New(pspstripe.Config{}).Timeout())
	require.Equal(t, 48*time.Hour, pspstripe.New(pspstripe.Config{HoldWindow: 48 * time.Hour}).Capabilities().HoldWindow,
		"an account of in-person payments declares its own window")
}

// Calls are psp's spans, under the caller's, with the trace context sent
// to Stripe, and without the payment method, the key or the metadata.
func TestTelemetry(t *testing.T) {
	t.Parallel()

	server := startStripeServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			answer(200, intentJSON("pi_1", "succeeded", "ch_1", 1))(w, r)
			return
		}
		if r.URL.Path == "/v1/payment_intents/search" {
			answer(200, `{"object":"search_result","has_more":false,"data":[]}`)(w, r)
			return
		}
		answer(200, `{"object":"list","has_more":false,"data":[]}`)(w, r)
	})
	spans := tracetest.NewSpanRecorder()
	tracerProvider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	adapter := newAdapter(server.URL, func(c *pspstripe.Config) { c.TracerProvider = tracerProvider })

	ctx, parent := tracerProvider.Tracer("test").Start(context.Background(), "charge.submit")
	_, err := adapter.Charge(ctx, visaRequest("pk_1"))
	require.NoError(t, err)
	_, err = adapter.Find(ctx, psp.LookupRequest{Reference: "ch_1", FirstSent: time.Now(), LastSent: time.Now()})
	require.Equal(t, psp.ErrNotFound, err)
	parent.End()

	ended := spans.Ended()
	require.Len(t, ended, 3)
	for i, want := range []struct{ name, outcome string }{{"psp.charge", "charge"}, {"psp.lookup", "not_found"}} {
		span := ended[i]
		require.Equal(t, want.name, span.Name())
		require.Equal(t, parent.SpanContext().SpanID(), span.Parent().SpanID())
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range span.Attributes() {
			attrs[kv.Key] = kv.Value
			require.NotContains(t, kv.Value.Emit(), "pm_canary")
			require.NotContains(t, kv.Value.Emit(), "canary_key")
			require.NotContains(t, kv.Value.Emit(), "ch_1")
		}
		require.Equal(t, want.outcome, attrs["psp.outcome"].AsString())

		req, _ := server.request(i)
		require.Contains(t, req.Header.Get("traceparent"), span.SpanContext().TraceID().String(), "Stripe is sent the trace context")
	}
}
