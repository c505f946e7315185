package scenario

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	chargeflow "github.com/chargeflow/chargeflow/client"
)

// Hand-made histories, on the history's clock in arbitrary units. Keys
// are long enough for redactKey to show their tail only.
const (
	keyA = "cfkey-test-charge-000001"
	keyB = "cfkey-test-charge-000002"
)

const never = math.MaxInt64

type hist struct{ ops []attempt }

func (h *hist) op(call int, in opInput, out opOutput, start, end int64) *hist {
	if out.status == 0 || out.status >= 500 {
		out.unknown, end = true, never
	}
	h.ops = append(h.ops, attempt{call: call, in: in, out: out, start: start, end: end})
	return h
}

func chargeIn(key, fp string, amount int64) opInput {
	return opInput{kind: opCharge, part: key, key: key, fp: fp, amount: amount}
}

func refundIn(charge string, step int, fp string, amount int64) opInput {
	key := fmt.Sprintf("%s-refund-%d", charge, step)
	return opInput{kind: opRefund, part: charge, key: key, fp: fp, amount: amount, charge: "ch_" + charge[len(charge)-1:]}
}

func readIn(id string) opInput { return opInput{kind: opRead, charge: id} }

func created(id, body string) opOutput { return opOutput{status: 201, id: id, body: body} }
func replayed(id, body string) opOutput {
	return opOutput{status: 201, id: id, body: body, replayed: true}
}
func refunded(id, body string, amount int64, replay bool) opOutput {
	return opOutput{status: 201, id: id, body: body, amount: amount, replayed: replay}
}
func refused(status int, code string) opOutput { return opOutput{status: status, code: code} }
func read(state string) opOutput               { return opOutput{status: 200, state: state} }

// legal is a history the contract allows: a charge and its concurrent
// duplicate (409 while the first was in flight), a replay, another body
// refused with 422, a late retry whose first attempt had no answer, reads,
// refunds up to the charge and one past it refused; a second key whose
// first attempt was cut and took effect (its retry is a replay), and a
// third whose cut attempt did not (its retry creates).
func legal() *hist {
	h := &hist{}
	h.op(1, chargeIn(keyA, "fpA", 1000), created("ch_1", "b1"), 0, 10).
		op(2, chargeIn(keyA, "fpA", 1000), refused(409, codeRequestInProgress), 1, 5).
		op(2, chargeIn(keyA, "fpA", 1000), replayed("ch_1", "b1"), 20, 30).
		op(3, chargeIn(keyA, "fpX", 1), refused(422, "idempotency_key_reused"), 40, 50).
		op(4, chargeIn(keyA, "fpA", 1000), opOutput{}, 55, 0).
		op(4, chargeIn(keyA, "fpA", 1000), replayed("ch_1", "b1"), 60, 65).
		op(5, readIn("ch_1"), read("pending"), 70, 75).
		op(5, readIn("ch_1"), read("succeeded"), 76, 80).
		op(6, refundIn(keyA, 0, "fpR0", 400), opOutput{status: 503, code: "database_unavailable"}, 90, 0).
		op(6, refundIn(keyA, 0, "fpR0", 400), refunded("re_1", "r1", 400, true), 95, 100).
		op(7, refundIn(keyA, 1, "fpR1", 0), refunded("re_2", "r2", 600, false), 110, 120).
		op(8, refundIn(keyA, 2, "fpR2", 1), refused(409, codeRefundExceedsCharge), 130, 140).
		op(7, refundIn(keyA, 1, "fpR1", 0), refunded("re_2", "r2", 600, true), 150, 160).
		op(9, readIn("ch_1"), read("succeeded"), 170, 180)
	h.op(10, chargeIn(keyB, "fpB", 500), opOutput{}, 0, 0).
		op(10, chargeIn(keyB, "fpB", 500), replayed("ch_2", "b2"), 10, 20).
		op(11, readIn("ch_2"), read("failed"), 30, 40).
		op(12, refundIn(keyB, 0, "fpS", 0), refused(409, codeChargeNotRefundable), 50, 60)
	h.op(13, chargeIn("cfkey-test-charge-000003", "fpC", 700), opOutput{}, 0, 0).
		op(13, chargeIn("cfkey-test-charge-000003", "fpC", 700), created("ch_3", "b3"), 10, 20)
	return h
}

func TestHistoryModelAcceptsALegalHistory(t *testing.T) {
	t.Parallel()
	res, violations := checkHistory(legal().ops, time.Minute, "")
	require.Equal(t, historyOK, res.Result, "%v", violations)
	require.Empty(t, violations)
	require.Equal(t, 3, res.Partitions)
	require.Equal(t, len(legal().ops), res.Operations)
}

// Each kind of illegal history fails, alone in its partition beside the
// legal ones, and the report names that partition only.
func TestHistoryModelRefusesEachIllegalHistory(t *testing.T) {
	t.Parallel()
	const bad = "cfkey-test-charge-000009"
	charge := func(out opOutput, start, end int64) func(*hist) {
		return func(h *hist) { h.op(90, chargeIn(bad, "fpZ", 1000), out, start, end) }
	}
	first := charge(created("ch_9", "b9"), 0, 10)
	refundStep := func(step int, amount int64, out opOutput, start, end int64) func(*hist) {
		return func(h *hist) { h.op(91+step, refundIn(bad, step, fmt.Sprintf("fpR%d", step), amount), out, start, end) }
	}
	readAs := func(state string, start, end int64) func(*hist) {
		return func(h *hist) { h.op(95, readIn("ch_9"), read(state), start, end) }
	}
	for name, steps := range map[string][]func(*hist){
		"two charges for one key":       {first, charge(created("ch_10", "b10"), 20, 30)},
		"a replay with another id":      {first, charge(replayed("ch_10", "b9"), 20, 30)},
		"a replay with another body":    {first, charge(replayed("ch_9", "b10"), 20, 30)},
		"a replay not marked as one":    {first, charge(created("ch_9", "b9"), 20, 30)},
		"a first answer marked replay":  {charge(replayed("ch_9", "b9"), 0, 10)},
		"422 for the same body":         {first, charge(refused(422, "idempotency_key_reused"), 20, 30)},
		"409 after the first answer":    {first, charge(refused(409, codeRequestInProgress), 20, 30)},
		"409 with nothing in flight":    {charge(refused(409, codeRequestInProgress), 0, 10), charge(created("ch_9", "b9"), 20, 30)},
		"400 for the stored request":    {first, charge(refused(400, "invalid_field"), 20, 30)},
		"an answer the contract lacks":  {first, charge(refused(404, "not_found"), 20, 30)},
		"a refund past what is left":    {first, refundStep(0, 600, refunded("re_1", "r1", 600, false), 20, 30), refundStep(1, 600, refunded("re_2", "r2", 600, false), 40, 50)},
		"all that is left, and more":    {first, refundStep(0, 600, refunded("re_1", "r1", 600, false), 20, 30), refundStep(1, 0, refunded("re_2", "r2", 1000, false), 40, 50)},
		"a refund that fit refused":     {first, readAs("succeeded", 15, 18), refundStep(0, 600, refused(409, codeRefundExceedsCharge), 20, 30)},
		"a succeeded charge refused":    {first, readAs("succeeded", 15, 18), refundStep(0, 0, refused(409, codeChargeNotRefundable), 20, 30)},
		"a failed charge refunded":      {first, readAs("failed", 15, 18), refundStep(0, 0, refunded("re_1", "r1", 1000, false), 20, 30)},
		"a terminal status that moved":  {first, readAs("succeeded", 15, 18), readAs("pending", 20, 30)},
		"a refund replayed for another": {first, refundStep(0, 600, refunded("re_1", "r1", 600, false), 20, 30), refundStep(0, 600, refunded("re_1", "r1", 500, true), 40, 50)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := legal()
			for _, s := range steps {
				s(h)
			}
			dir := t.TempDir()
			res, violations := checkHistory(h.ops, time.Minute, dir)
			require.Equal(t, historyIllegal, res.Result)
			require.Len(t, violations, 1, "%v", violations)
			require.Equal(t, InvariantHistory, violations[0].Invariant)
			require.Equal(t, redactKey(bad), violations[0].Subject)
			require.Equal(t, 1, res.Found)
			require.Contains(t, res.Text, "✗", "the text marks what no linearization places")
			require.Contains(t, res.Text, redactKey(bad))
			require.NotContains(t, res.Text, bad, "keys are redacted")
			require.Equal(t, filepath.Join(dir, "history.html"), res.Visualization)
			page, err := os.ReadFile(res.Visualization)
			require.NoError(t, err)
			require.Contains(t, string(page), "ch_9", "the page shows the partition's operations")
			require.NotContains(t, string(page), redactKey(keyA), "and only the partitions that failed")
		})
	}
}

// A partition whose only fault is a cut attempt stays legal whether the
// attempt took effect or not, and a 409 that overlaps a cut attempt of
// the key is one the contract allows.
func TestHistoryUnknownOutcomes(t *testing.T) {
	t.Parallel()
	h := &hist{}
	h.op(1, chargeIn(keyA, "fpA", 1000), opOutput{}, 0, 0).
		op(2, chargeIn(keyA, "fpA", 1000), refused(409, codeRequestInProgress), 5, 8).
		op(1, chargeIn(keyA, "fpA", 1000), created("ch_1", "b1"), 10, 20)
	res, violations := checkHistory(h.ops, time.Minute, "")
	require.Equal(t, historyOK, res.Result, "%v", violations)

	// Twenty cut attempts before the answer: the search stays linear.
	h = &hist{}
	for i := range 20 {
		h.op(1, chargeIn(keyB, "fpB", 1000), opOutput{status: 503}, int64(i*10), 0)
	}
	h.op(1, chargeIn(keyB, "fpB", 1000), created("ch_2", "b2"), 300, 310)
	res, violations = checkHistory(h.ops, time.Minute, "")
	require.Equal(t, historyOK, res.Result, "%v", violations)
}

// chargesAPI is an API of charges that keeps the idempotency contract
// for one tenant, except as broken says: every first attempt of a key is
// answered 503 after it is stored, so the client retries into a replay.
type chargesAPI struct {
	broken  string // "": none; "body": every second replay's body differs
	mu      sync.Mutex
	stored  map[string]string
	n       int
	replays int
}

func (a *chargesAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := r.Header.Get("Idempotency-Key")
	body, ok := a.stored[key]
	if !ok {
		a.n++
		a.stored[key] = fmt.Sprintf(`{"id": "ch_%d", "status": "pending"}`, a.n)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"code": "database_unavailable"}`)
		return
	}
	if a.replays++; a.broken == "body" && a.replays%2 == 0 {
		body = strings.Replace(body, "pending", "succeeded", 1)
	}
	w.Header().Set("Idempotent-Replayed", "true")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprint(w, body)
}

// The client records each attempt through its transport and observer:
// the key, the body's fingerprint, the cut attempt as unknown, the
// replay; and a replay that differs is caught.
func TestClientRecordsItsHistory(t *testing.T) {
	t.Parallel()
	for _, broken := range []string{"", "body"} {
		api := &chargesAPI{broken: broken, stored: map[string]string{}}
		server := httptest.NewServer(api)
		t.Cleanup(server.Close)
		c := newClient(func() string { return server.URL }, "cfk_test", time.Second, 10*time.Second, make(chan struct{}, 1))
		r := charge(keyA, chargeflow.ChargeParams{Amount: 1000, Currency: "USD", PaymentMethod: "pm_card_visa"})
		a := c.post(context.Background(), r)
		require.Equal(t, http.StatusCreated, a.status)
		status, _, _ := c.send(context.Background(), r)
		require.Equal(t, http.StatusCreated, status)

		ops := c.history.attempts()
		require.Len(t, ops, 3)
		require.True(t, ops[0].out.unknown)
		require.Equal(t, int64(never), ops[0].end)
		for _, op := range ops {
			require.Equal(t, keyA, op.in.key)
			require.Equal(t, ops[0].in.fp, op.in.fp)
			require.NotEmpty(t, op.in.fp)
			require.Equal(t, int64(1000), op.in.amount)
			require.LessOrEqual(t, op.start, op.end)
		}
		require.Less(t, ops[0].start, ops[1].start)
		require.Equal(t, "ch_1", ops[1].out.id)
		require.True(t, ops[1].out.replayed)

		res, violations := checkHistory(ops, time.Minute, "")
		if broken == "" {
			require.Equal(t, historyOK, res.Result, "%v", violations)
		} else {
			require.Equal(t, historyIllegal, res.Result)
			require.Len(t, violations, 1)
		}
	}
}

// The negative control's transport turns every replay into 409
// request_in_progress, which the library retries and the history check
// catches: the first attempt was answered long before.
func TestBrokenReplaysAreCaught(t *testing.T) {
	t.Parallel()
	api := &chargesAPI{stored: map[string]string{}}
	server := httptest.NewServer(api)
	t.Cleanup(server.Close)
	c := newClient(func() string { return server.URL }, "cfk_test", time.Second, 10*time.Second, make(chan struct{}, 1))
	r := charge(keyA, chargeflow.ChargeParams{Amount: 1000, Currency: "USD", PaymentMethod: "pm_card_visa"})
	require.Equal(t, http.StatusCreated, c.post(context.Background(), r).status)
	c.breakReplays.Store(true)
	status, _, _ := c.send(context.Background(), r)
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, int64(1), c.replaced.Load())

	res, violations := checkHistory(c.history.attempts(), time.Minute, "")
	require.Equal(t, historyIllegal, res.Result)
	require.Len(t, violations, 1)
	require.Contains(t, violations[0].Detail, "409 request_in_progress")
}

// net/http sends a request with an Idempotency-Key again when the reused
// connection it went out on fails before any answer: the history records
// the lost try as an attempt of unknown outcome, so the replay that
// answers it is one the contract allows.
func TestTransportResendIsRecorded(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	stored := false
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodGet {
			fmt.Fprint(w, `{"id": "ch_1", "status": "pending"}`)
			return
		}
		if !stored {
			// Stored, then the process dies before it answers.
			stored = true
			conn, _, err := w.(http.Hijacker).Hijack()
			require.NoError(t, err)
			_ = conn.Close()
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id": "ch_1", "status": "pending"}`)
	}))
	t.Cleanup(server.Close)
	c := newClient(func() string { return server.URL }, "cfk_test", time.Second, 10*time.Second, make(chan struct{}, 1))
	// A read first, so that the POST goes out on a reused connection.
	_, _ = c.poll.GetCharge(c.observed(context.Background(), nil, nil), "ch_0")
	r := charge(keyA, chargeflow.ChargeParams{Amount: 1000, Currency: "USD", PaymentMethod: "pm_card_visa"})
	status, _, replay := c.send(context.Background(), r)
	require.Equal(t, http.StatusCreated, status)
	require.True(t, replay, "the transport sent it again, and the second try got the replay")

	var posts []attempt
	for _, a := range c.history.attempts() {
		if a.in.kind == opCharge {
			posts = append(posts, a)
		}
	}
	require.Len(t, posts, 2, "the lost try, and the one answered")
	require.True(t, posts[0].out.unknown)
	res, violations := checkHistory(c.history.attempts(), time.Minute, "")
	require.Equal(t, historyOK, res.Result, "%v", violations)
}

func operationIn(charge string, step int, kind opKind, fp string, amount int64) opInput {
	key := fmt.Sprintf("%s-op-%d", charge, step)
	return opInput{kind: kind, part: charge, key: key, fp: fp, amount: amount, charge: "ch_" + charge[len(charge)-1:]}
}

// heldLegal is a charge captured later: a capture of more than was
// authorized refused, a capture and a cancel sent at once (the cancel
// refused while the capture is in flight), the capture's cut attempt
// replayed, reads of it held then captured, and a cancel after refused.
func heldLegal(charge string, extra ...func(*hist)) *hist {
	h := &hist{}
	h.op(1, chargeIn(charge, "fpA", 1000), created("ch_"+charge[len(charge)-1:], "b1"), 0, 10).
		op(2, readIn("ch_"+charge[len(charge)-1:]), read(statusHeld), 12, 14).
		op(3, operationIn(charge, 0, opCapture, "fpC0", 1001), refused(422, codeCaptureExceedsAuthorization), 20, 25).
		op(4, operationIn(charge, 1, opCapture, "fpC1", 0), opOutput{}, 30, 0).
		op(5, operationIn(charge, 2, opCancel, "fpX2", 0), refused(409, codeOperationInProgress), 31, 35).
		op(4, operationIn(charge, 1, opCapture, "fpC1", 0), refunded("cp_1", "c1", 1000, true), 40, 45).
		op(6, readIn("ch_"+charge[len(charge)-1:]), read("succeeded"), 50, 55).
		op(7, operationIn(charge, 3, opCancel, "fpX3", 0), refused(409, codeChargeNotCapturable), 60, 65)
	for _, e := range extra {
		e(h)
	}
	return h
}

// The model of captures and cancels: what heldLegal does is allowed, and
// each answer the contract forbids is caught in its partition.
func TestHistoryModelOperations(t *testing.T) {
	t.Parallel()
	res, violations := checkHistory(heldLegal(keyA).ops, time.Minute, "")
	require.Equal(t, historyOK, res.Result, "%v", violations)

	// released is a second charge, read held, then released (its hold
	// expired): legal alone.
	released := func(h *hist) {
		h.op(30, chargeIn(keyB, "fpB", 500), created("ch_2", "b2"), 0, 10).
			op(31, readIn("ch_2"), read(statusHeld), 12, 14).
			op(31, readIn("ch_2"), read(statusReleased), 20, 25)
	}
	res, violations = checkHistory(heldLegal(keyA, released).ops, time.Minute, "")
	require.Equal(t, historyOK, res.Result, "%v", violations)

	step := func(call, step int, kind opKind, amount int64, out opOutput, start, end int64) func(*hist) {
		return func(h *hist) {
			h.op(call, operationIn(keyA, step, kind, fmt.Sprintf("fpO%d", step), amount), out, start, end)
		}
	}
	for name, extra := range map[string]func(*hist){
		"a second capture accepted after the charge was read captured": step(20, 4, opCapture, 0, refunded("cp_2", "c2", 1000, false), 70, 75),
		"a capture of the wrong amount":                                step(20, 4, opCapture, 300, refunded("cp_2", "c2", 1000, false), 8, 9),
		"operation_in_progress with nothing else in flight":            step(20, 4, opCancel, 0, refused(409, codeOperationInProgress), 15, 18),
		"capture_exceeds_authorization for what fits":                  step(20, 4, opCapture, 500, refused(422, codeCaptureExceedsAuthorization), 15, 18),
		"a capture of a charge never created":                          step(20, 4, opCapture, 0, refunded("cp_2", "c2", 1000, false), -20, -15),
		"a cancel accepted after a read released": func(h *hist) {
			h.op(21, readIn("ch_1"), read(statusReleased), 66, 67)
			step(20, 4, opCancel, 0, refunded("cx_2", "x2", 1000, false), 68, 69)(h)
		},
		"a released charge read held again": func(h *hist) {
			h.op(21, readIn("ch_1"), read(statusReleased), 66, 67)
			h.op(22, readIn("ch_1"), read(statusHeld), 68, 69)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, violations := checkHistory(heldLegal(keyA, extra).ops, time.Minute, "")
			require.Equal(t, historyIllegal, res.Result, "%v", violations)
		})
	}
}
