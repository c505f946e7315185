package scenario

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeAPI answers GET /v1/charges/{id} and POST /v1/refunds as docs/api.md
// says, for succeeded charges of 1000 and one failed charge, keeping what is
// reserved of each. overAccept makes it accept a refund beyond what is left,
// the bug the client's expectations must catch. Every first attempt of a
// key is answered 503 and then 409 request_in_progress, so every refund is
// retried with its key.
type fakeAPI struct {
	overAccept bool

	mu       sync.Mutex
	reserved map[string]int64
	attempts map[string]int
	keys     []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	problem := func(status int, code string) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"code": %q}`, code)
	}
	if r.Method == http.MethodGet {
		id := strings.TrimPrefix(r.URL.Path, chargesPath+"/")
		status := "succeeded"
		if id == "ch_failed" {
			status = "failed"
		}
		fmt.Fprintf(w, `{"id": %q, "status": %q, "amount": 1000}`, id, status)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	f.keys = append(f.keys, key)
	f.attempts[key]++
	switch f.attempts[key] {
	case 1:
		problem(http.StatusServiceUnavailable, "database_unavailable")
		return
	case 2:
		problem(http.StatusConflict, codeRequestInProgress)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Charge string
		Amount int64
	}
	_ = json.Unmarshal(body, &req)
	if req.Charge == "ch_failed" {
		problem(http.StatusConflict, codeChargeNotRefundable)
		return
	}
	left := 1000 - f.reserved[req.Charge]
	if req.Amount == 0 {
		req.Amount = left
	}
	if (req.Amount > left || req.Amount == 0) && !f.overAccept {
		problem(http.StatusConflict, codeRefundExceedsCharge)
		return
	}
	f.reserved[req.Charge] += req.Amount
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id": "re_%d", "charge": %q, "amount": %d}`, len(f.keys), req.Charge, req.Amount)
}

func refundSystem(t *testing.T, api *fakeAPI) *system {
	api.reserved, api.attempts = map[string]int64{}, map[string]int{}
	server := httptest.NewServer(api)
	t.Cleanup(server.Close)
	refunds := newRefunder(4)
	return &system{
		client:  newClient(func() string { return server.URL }, "cfk_test", time.Second, 10*time.Second, refunds.slots),
		refunds: refunds,
		rnd:     rand.New(rand.NewPCG(1, 2)),
		seed:    7,
	}
}

// The client refunds charges it reads settled by every plan, retries each
// refund with its key through 503 and 409 request_in_progress, counts the
// refusals the plans expect, remembers each 201 as a refund's ack, and finds
// nothing unexpected in an API that keeps what is left of a charge.
func TestRefundsAsAMerchantSendsThem(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{}
	s := refundSystem(t, api)
	ctx := t.Context()
	for i := range 40 {
		charge := request{path: chargesPath, key: fmt.Sprintf("charge-%d", i)}
		s.refundLater(ctx, charge, fmt.Appendf(nil, `{"id": "ch_%d", "amount": 1000}`, i))
	}
	s.refundLater(ctx, request{path: chargesPath, key: "charge-failed"}, []byte(`{"id": "ch_failed", "amount": 1000}`))
	started, finished := s.waitRefunds()
	require.Equal(t, 41, started)
	require.Equal(t, started, finished)

	c := s.client
	require.Empty(t, c.unexpected)
	require.Equal(t, 1, c.refusals[codeChargeNotRefundable], "the failed charge's refund")
	require.Positive(t, c.refusals[codeRefundExceedsCharge], "the plans that try to exceed")
	require.Positive(t, c.refundAcks)
	require.Equal(t, len(c.acks), c.refundAcks)
	for key, a := range c.acks {
		require.Equal(t, refundsPath, a.req.path)
		require.Equal(t, 3, api.attempts[key], "each refund retried with its own key until its final answer")
		require.Equal(t, canaryMetadata(s.seed), a.req.refund.Metadata[canaryMetadataKey], "refunds carry the metadata canary")
	}
	for charge, reserved := range api.reserved {
		require.LessOrEqual(t, reserved, int64(1000), charge)
	}
}

// An API that accepts a refund beyond what is left of the charge is caught
// by the client's expectations, before the provider is even asked.
func TestRefundBeyondTheChargeIsUnexpected(t *testing.T) {
	t.Parallel()
	s := refundSystem(t, &fakeAPI{overAccept: true})
	for i := range 20 {
		s.refundLater(t.Context(), request{path: chargesPath, key: fmt.Sprintf("charge-%d", i)}, fmt.Appendf(nil, `{"id": "ch_%d", "amount": 1000}`, i))
	}
	s.waitRefunds()
	require.NotEmpty(t, s.client.unexpected)
	require.Contains(t, s.client.unexpected[0], "not refund_exceeds_charge")
}
