package scenario

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	chargeflow "github.com/chargeflow/chargeflow/client"
)

// The history is every HTTP exchange the merchant's client made in a run,
// as the client saw it: what it sent, what came back (or that nothing
// did), and when, on one monotonic clock of the runner's process. Each
// attempt is an operation of its own — a retry by the library is another
// operation with the same key. checkHistory (linearize.go) judges it
// against the idempotency contract of docs/api.md. Keys stay in memory;
// bodies are kept only as hashes.

// opKind is what an operation did.
type opKind uint8

const (
	opCharge  opKind = iota + 1 // POST /v1/charges
	opRefund                    // POST /v1/refunds
	opRead                      // GET /v1/charges/{id}
	opCapture                   // POST /v1/charges/{id}/capture
	opCancel                    // POST /v1/charges/{id}/cancel
)

// opInput is what the client sent.
type opInput struct {
	kind opKind
	// part names the partition: the charge's idempotency key, for the
	// charge, its refunds and its reads (a read's is found from the id
	// when the history is checked).
	part string
	// key is the idempotency key; a read has none.
	key string
	// fp is a hash of the method, route and body bytes as sent.
	fp string
	// amount is a charge's amount, or the amount a refund or a capture
	// asked for (0: all that is left, all that was authorized).
	amount int64
	// charge is the charge a refund, a capture or a cancel names, or the
	// one a read reads.
	charge string
	// inFlight says that another attempt with the key, which may have held
	// it, overlaps this one in time (set when the history is checked).
	inFlight bool
}

// opOutput is what came back.
type opOutput struct {
	// unknown: no answer (a timeout, a connection cut), or a 5xx; the
	// request may or may not have taken effect, now or later.
	unknown bool
	status  int // 0 without an answer
	code    string
	id      string
	// body is a hash of the answer's body.
	body     string
	replayed bool
	// amount is a refund's, a capture's or a cancel's, in a 201; state a
	// charge's status, in a read.
	amount int64
	state  string
}

// attempt is one recorded operation.
type attempt struct {
	call       int
	in         opInput
	out        opOutput
	start, end int64 // nanoseconds on the history's clock; end is math.MaxInt64 when unknown
}

// history records the operations of one run's client.
type history struct {
	epoch time.Time
	calls atomic.Int64

	mu  sync.Mutex
	ops []attempt
}

func newHistory() *history { return &history{epoch: time.Now()} }

// now is the history's clock: monotonic, since the history began.
func (h *history) now() int64 { return int64(time.Since(h.epoch)) }

// attempts returns a copy of what was recorded.
func (h *history) attempts() []attempt {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]attempt(nil), h.ops...)
}

// call is one call of the library (its attempts one after the other),
// carried by the context to the transport, which stamps each attempt's
// start.
type call struct {
	id int
	in opInput

	mu    sync.Mutex
	start int64
	sent  bool
	fp    string
	// tries counts the connections the transport sent the attempt on:
	// net/http sends a request with an Idempotency-Key again, on a new
	// connection, when a reused one failed before any answer.
	tries int
}

type callKey struct{}

// begin starts a call of r (nil for a read) under ctx.
func (h *history) begin(ctx context.Context, r *request) (context.Context, *call) {
	c := &call{id: int(h.calls.Add(1)), in: opInput{kind: opRead}}
	if r != nil {
		c.in = opInput{kind: opCharge, part: r.key, key: r.key}
		if r.charge != nil {
			c.in.amount = r.charge.Amount
		}
		switch {
		case r.refund != nil:
			c.in = opInput{kind: opRefund, part: cmp.Or(r.parent, r.key), key: r.key, amount: r.refund.Amount, charge: r.refund.Charge}
		case r.capture != nil:
			c.in = opInput{kind: opCapture, part: cmp.Or(r.parent, r.key), key: r.key, amount: r.capture.Amount, charge: r.chargeID}
		case r.cancel != nil:
			c.in = opInput{kind: opCancel, part: cmp.Or(r.parent, r.key), key: r.key, charge: r.chargeID}
		}
	}
	return context.WithValue(ctx, callKey{}, c), c
}

// observe records the exchange that ended one of c's attempts.
func (h *history) observe(c *call, e chargeflow.Exchange) {
	end := h.now()
	c.mu.Lock()
	start, sent, fp, tries := c.start, c.sent, c.fp, c.tries
	c.sent, c.tries = false, 0
	c.mu.Unlock()
	if !sent {
		return // it never reached the network (a slot's wait ended first)
	}
	in := c.in
	in.fp = fp
	var resent []attempt
	if e.Method == http.MethodPost {
		// Each try but the last went out and its answer, if any, was
		// never read: an attempt of unknown outcome.
		for range tries - 1 {
			resent = append(resent, attempt{call: c.id, in: in, out: opOutput{unknown: true}, start: start, end: math.MaxInt64})
		}
	}
	if e.Method == http.MethodGet {
		id, ok := strings.CutPrefix(e.Path, chargesPath+"/")
		if !ok || strings.Contains(id, "/") || e.Status != http.StatusOK && e.Status != http.StatusNotFound {
			return // another read, or one that says nothing
		}
		in.kind, in.charge = opRead, id
	}
	out := outputOf(e)
	if out.unknown {
		end = math.MaxInt64
	}
	h.mu.Lock()
	h.ops = append(append(h.ops, resent...), attempt{call: c.id, in: in, out: out, start: start, end: end})
	h.mu.Unlock()
}

// outputOf reads what the history keeps of an answer.
func outputOf(e chargeflow.Exchange) opOutput {
	out := opOutput{status: e.Status, replayed: e.Replayed, unknown: e.Status == 0 || e.Status >= 500}
	if e.Body != nil {
		out.body = digest(e.Body)
		var b struct {
			ID     string          `json:"id"`
			Code   string          `json:"code"`
			Amount int64           `json:"amount"`
			Status json.RawMessage `json:"status"`
		}
		if json.Unmarshal(e.Body, &b) == nil {
			out.id, out.code, out.amount = b.ID, b.Code, b.Amount
			_ = json.Unmarshal(b.Status, &out.state) // a charge's status; a problem's is a number
		}
	}
	return out
}

// digest is a short hash of b.
func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// stamped is the transport's first step: it stamps the start of each
// attempt of a recorded call and hashes the body it sends.
type stamped struct {
	next http.RoundTripper
	h    *history
}

func (t stamped) RoundTrip(req *http.Request) (*http.Response, error) {
	if c, ok := req.Context().Value(callKey{}).(*call); ok {
		start := t.h.now()
		var fp string
		if req.GetBody != nil {
			if body, err := req.GetBody(); err == nil {
				sum := sha256.New()
				_, _ = io.WriteString(sum, req.Method+" "+req.URL.Path+"\n")
				_, _ = io.Copy(sum, body)
				_ = body.Close()
				fp = hex.EncodeToString(sum.Sum(nil)[:8])
			}
		}
		c.mu.Lock()
		c.start, c.sent, c.fp, c.tries = start, true, fp, 0
		c.mu.Unlock()
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
			c.mu.Lock()
			c.tries++
			c.mu.Unlock()
		}}))
	}
	return t.next.RoundTrip(req)
}

// brokenReplays stands in for an API that answers every retry of a
// finished request 409 request_in_progress, as if its first request still
// held the key (a marker of "in progress" that is never cleared): the
// history check's negative control. It sits on the merchant's side of the
// wire so that no build of the product has such a branch; what it tests is
// the checker. The library retries such an answer, and the runner's other
// checks see nothing wrong.
type brokenReplays struct {
	next     http.RoundTripper
	on       *atomic.Bool
	replaced *atomic.Int64
}

func (t brokenReplays) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || !t.on.Load() || req.Method != http.MethodPost || resp.Header.Get("Idempotent-Replayed") != "true" {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	t.replaced.Add(1)
	body := []byte(`{"type":"about:blank","title":"Request in progress","status":409,"code":"request_in_progress",` +
		`"detail":"a request with this Idempotency-Key is still being processed; retry shortly"}`)
	return &http.Response{
		Status: "409 Conflict", StatusCode: http.StatusConflict, Proto: resp.Proto, ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor,
		Header:        http.Header{"Content-Type": {"application/problem+json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)), Request: req,
	}, nil
}
