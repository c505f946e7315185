package scenario

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	chargeflow "github.com/chargeflow/chargeflow/client"
)

// The routes the merchant's backend posts to; a capture's and a cancel's
// name their charge ({id}).
const (
	chargesPath = "/v1/charges"
	refundsPath = "/v1/refunds"
	capturePath = "/v1/charges/{id}/capture"
	cancelPath  = "/v1/charges/{id}/cancel"
)

// The refusals of a refund that are final answers (docs/api.md, "Refunds"):
// nothing was stored, and the same request would be refused again.
const (
	codeChargeNotRefundable = "charge_not_refundable"
	codeRefundExceedsCharge = "refund_exceeds_charge"
	codeRequestInProgress   = "request_in_progress"
)

// The refusals of a capture or a cancel that are final answers
// (docs/api.md, "Authorize now, capture later"): nothing was stored.
const (
	codeChargeNotCapturable         = "charge_not_capturable"
	codeOperationInProgress         = "operation_in_progress"
	codeCaptureExceedsAuthorization = "capture_exceeds_authorization"
)

// operationRefusals are those refusals, by code.
var operationRefusals = map[string]bool{codeChargeNotCapturable: true, codeOperationInProgress: true, codeCaptureExceedsAuthorization: true}

// client is the merchant's backend as a careful engineer writes it, on the
// Go client merchants import (package client, docs/client.md): one
// idempotency key per charge or refund, chosen before the first attempt,
// and the library's retries with that same key on every transport error,
// 409 request_in_progress, 429 and 5xx until a final answer, for at most
// giveUp. An exchange observer (client.WithExchangeObserver) sees every
// attempt: the client remembers every 201 it saw, byte for byte, to check
// that each has a row and that every replay is identical to the first
// answer; it counts every status and the refusals of refunds, captures and
// cancels.
type client struct {
	// api retries until a final answer; once makes a single attempt; poll
	// reads charges, captures and cancels, and refunds posts refunds,
	// captures and cancels, each exchange through one of the refunder's
	// slots.
	api, once, poll, refunds *chargeflow.Client
	// giveUp bounds the retries of one request.
	giveUp time.Duration

	mu         sync.Mutex
	acks       map[string]ack // by idempotency key
	chargeAcks int
	refundAcks int
	opAcks     int
	// refusals and opRefusals count the final refusals of refunds, and of
	// captures and cancels, by problem code.
	refusals   map[string]int
	opRefusals map[string]int
	statuses   map[int]int
	sent       int
	// mismatches lists keys whose replay differed from the first 201.
	mismatches []string
	// unexpected lists answers a valid request should never get.
	unexpected []string
	// gaveUp counts the requests the client stopped retrying without a
	// final answer.
	gaveUp int

	// history records every attempt (history.go); breakReplays turns the
	// answer to every replay into 409 request_in_progress (brokenReplays),
	// replaced counting them.
	history      *history
	breakReplays atomic.Bool
	replaced     atomic.Int64
}

// request is one POST the merchant sends: a charge, a refund, a capture or
// a cancel, under the key it chose before the first attempt (the params'
// IdempotencyKey).
type request struct {
	path string
	key  string
	// parent is a refund's, a capture's or a cancel's charge's key: the
	// history's partition.
	parent string
	charge *chargeflow.ChargeParams
	refund *chargeflow.RefundParams
	// capture and cancel are of the charge chargeID.
	capture  *chargeflow.CaptureParams
	cancel   *chargeflow.CancelParams
	chargeID string
}

// operation reports whether r is a capture or a cancel.
func (r request) operation() bool { return r.capture != nil || r.cancel != nil }

// answer is the final answer to a request: its status (0 if the client
// gave up), the problem's code for a refusal, and the body; last is the
// last exchange's status and code, which says why a client gave up.
type answer struct {
	status int
	code   string
	body   []byte
	last   string
}

// ack is a 201 the client saw, and the request it answered.
type ack struct {
	id   string
	req  request
	body []byte
}

// The base URL the library is given: the API restarts on a new port after
// every kill, so the connections are dialled to wherever it listens now,
// as a load balancer's name stays while the servers behind it move.
const apiBaseURL = "http://chargeflow-api"

// newClient makes the merchant's clients of the API that baseURL names at
// each dial. slots bounds the reads of charges in flight at once.
func newClient(baseURL func() string, apiKey string, timeout, giveUp time.Duration, slots chan struct{}) *client {
	dialer := &net.Dialer{Timeout: timeout}
	c := &client{
		giveUp:     giveUp,
		acks:       map[string]ack{},
		refusals:   map[string]int{},
		opRefusals: map[string]int{},
		statuses:   map[int]int{},
		history:    newHistory(),
	}
	var transport http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: 64, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, strings.TrimPrefix(baseURL(), "http://"))
	}}
	transport = stamped{next: brokenReplays{next: transport, on: &c.breakReplays, replaced: &c.replaced}, h: c.history}
	build := func(rt http.RoundTripper, opts ...chargeflow.Option) *chargeflow.Client {
		c, err := chargeflow.New(apiBaseURL, apiKey, append([]chargeflow.Option{chargeflow.WithHTTPClient(&http.Client{Timeout: timeout, Transport: rt})}, opts...)...)
		if err != nil {
			panic(err) // the options are constants
		}
		return c
	}
	// A slotted client's timeout starts once it holds a slot: the wait for
	// one is the merchant's own queue, not the API being slow, and a
	// request that timed out in it would be retried only to wait again.
	slottedClient := func(opts ...chargeflow.Option) *chargeflow.Client {
		rt := slotted{slots: slots, next: transport, timeout: timeout}
		c, err := chargeflow.New(apiBaseURL, apiKey, append([]chargeflow.Option{chargeflow.WithHTTPClient(&http.Client{Transport: rt})}, opts...)...)
		if err != nil {
			panic(err) // the options are constants
		}
		return c
	}
	c.api = build(transport, chargeflow.WithBackoff(20*time.Millisecond, time.Second), chargeflow.WithMaxElapsed(giveUp))
	c.once = build(transport, chargeflow.WithMaxElapsed(0))
	c.poll = slottedClient(chargeflow.WithBackoff(100*time.Millisecond, 2*time.Second), chargeflow.WithMaxElapsed(giveUp))
	c.refunds = slottedClient(chargeflow.WithBackoff(20*time.Millisecond, time.Second), chargeflow.WithMaxElapsed(giveUp))
	return c
}

// slotted sends each request once it holds one of the slots, and gives
// it timeout from then on, until its body is closed.
type slotted struct {
	slots   chan struct{}
	next    http.RoundTripper
	timeout time.Duration
}

func (t slotted) RoundTrip(req *http.Request) (*http.Response, error) {
	select {
	case t.slots <- struct{}{}:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	defer func() { <-t.slots }()
	ctx, cancel := context.WithTimeout(req.Context(), t.timeout)
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

// cancelOnClose ends a request's timeout when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// observed is ctx with an observer that counts every exchange's status
// (and every POST sent), records it in the history as an attempt of r (a
// read when nil), then hands the exchange to see, if set.
func (c *client) observed(ctx context.Context, r *request, see func(chargeflow.Exchange)) context.Context {
	ctx, call := c.history.begin(ctx, r)
	return chargeflow.WithExchangeObserver(ctx, func(e chargeflow.Exchange) {
		c.mu.Lock()
		if e.Method == http.MethodPost {
			c.sent++
		}
		if e.Status != 0 {
			c.statuses[e.Status]++
		}
		c.mu.Unlock()
		c.history.observe(call, e)
		if see != nil {
			see(e)
		}
	})
}

// create sends r through lib and returns its error; see gets every
// exchange.
func (c *client) create(ctx context.Context, lib *chargeflow.Client, r request, see func(chargeflow.Exchange)) error {
	ctx = c.observed(ctx, &r, see)
	var err error
	switch {
	case r.refund != nil:
		_, err = lib.CreateRefund(ctx, *r.refund)
	case r.capture != nil:
		_, err = lib.CaptureCharge(ctx, r.chargeID, *r.capture)
	case r.cancel != nil:
		_, err = lib.CancelCharge(ctx, r.chargeID, *r.cancel)
	default:
		_, err = lib.CreateCharge(ctx, *r.charge)
	}
	return err
}

// send POSTs r once and returns the status (0 for a transport error), the
// body and whether the answer is marked as a replay.
func (c *client) send(ctx context.Context, r request) (int, []byte, bool) {
	var last chargeflow.Exchange
	_ = c.create(ctx, c.once, r, func(e chargeflow.Exchange) {
		last = e
		last.Body = bytes.Clone(e.Body)
	})
	return last.Status, last.Body, last.Replayed
}

// transient reports whether an answer says nothing final: the same request
// again, with the same key, after a pause (what the library retries).
func transient(status int, code string) bool {
	return status == 0 || status == http.StatusConflict && code == codeRequestInProgress ||
		status == http.StatusTooManyRequests || status >= 500
}

// post sends r until it gets a final answer, the library retrying with the
// same key: a 201 (every 201 seen is remembered, as it came), a refund's,
// a capture's or a cancel's refusal (counted), or anything else, which a
// valid request never gets (recorded as unexpected). The status is 0 if it
// gave up.
func (c *client) post(ctx context.Context, r request) answer {
	lib := c.api
	if r.refund != nil || r.operation() {
		lib = c.refunds
	}
	var a answer
	err := c.create(ctx, lib, r, func(e chargeflow.Exchange) {
		a.last = exchangeSummary(e)
		if e.Status == http.StatusCreated {
			a.body = bytes.Clone(e.Body)
			c.recordAck(r, a.body)
		}
	})
	var refusal *chargeflow.Error
	switch {
	case err == nil:
		a.status = http.StatusCreated
	case errors.Is(err, chargeflow.ErrOutcomeUnknown):
		a.status = 0 // gave up
		c.mu.Lock()
		c.gaveUp++
		c.mu.Unlock()
	case errors.As(err, &refusal):
		a.status, a.code = refusal.Status, string(refusal.Code)
		if r.refund != nil && a.status == http.StatusConflict &&
			(a.code == codeChargeNotRefundable || a.code == codeRefundExceedsCharge) {
			c.mu.Lock()
			c.refusals[a.code]++
			c.mu.Unlock()
			break
		}
		if r.operation() && operationRefusals[a.code] {
			c.mu.Lock()
			c.opRefusals[a.code]++
			c.mu.Unlock()
			break
		}
		c.unexpectedf("key %s: %d %s", redactKey(r.key), a.status, cmp.Or(a.code, refusal.Title))
	default:
		c.unexpectedf("key %s: %v", redactKey(r.key), err)
	}
	return a
}

// exchangeSummary says how one exchange ended, for a client that gives
// up: the status and the problem's code, or the network error's kind.
func exchangeSummary(e chargeflow.Exchange) string {
	if e.Status == 0 {
		var netErr net.Error
		if errors.As(e.Err, &netErr) && netErr.Timeout() {
			return "no answer (timed out)"
		}
		return "no answer (connection failed)"
	}
	var p struct{ Code string }
	_ = json.Unmarshal(e.Body, &p)
	return strings.TrimSpace(fmt.Sprint(e.Status, " ", p.Code))
}

// awaitOutcome waits, for at most giveUp, until the charge is succeeded,
// failed or in review (the library's WaitForOutcome, each read through a
// slot): its status, or "" after an answer no charge the client saw
// acknowledged should get (recorded as unexpected); false if it gave up.
func (c *client) awaitOutcome(ctx context.Context, id string) (status string, final bool) {
	ctx, cancel := context.WithTimeout(ctx, c.giveUp)
	defer cancel()
	charge, err := c.poll.WaitForOutcome(c.observed(ctx, nil, nil), id)
	var refusal *chargeflow.Error
	switch {
	case err == nil:
		return string(charge.Status), true
	case errors.As(err, &refusal) && !transient(refusal.Status, string(refusal.Code)):
		c.unexpectedf("charge %s: GET answered %d %s", id, refusal.Status, refusal.Code)
		return "", true
	}
	return "", false
}

// awaitOperation waits, for at most giveUp, until the capture or cancel
// is succeeded, failed or in review (the library's WaitForCapture,
// WaitForCancel, each read through a slot), and returns it; nil after an
// answer no operation the client saw acknowledged should get (recorded as
// unexpected); false if it gave up.
func (c *client) awaitOperation(ctx context.Context, id string, cancel bool) (op *chargeflow.Operation, final bool) {
	ctx, stop := context.WithTimeout(ctx, c.giveUp)
	defer stop()
	wait := c.poll.WaitForCapture
	if cancel {
		wait = c.poll.WaitForCancel
	}
	op, err := wait(c.observed(ctx, nil, nil), id)
	var refusal *chargeflow.Error
	switch {
	case err == nil:
		return op, true
	case errors.As(err, &refusal) && !transient(refusal.Status, string(refusal.Code)):
		c.unexpectedf("%s: GET answered %d %s", id, refusal.Status, refusal.Code)
		return nil, true
	}
	return nil, false
}

// readCharge reads the charge once it is known to exist (the library
// retrying what is not final, through a slot): nil after an answer that
// is not the charge (recorded as unexpected).
func (c *client) readCharge(ctx context.Context, id string) *chargeflow.Charge {
	ctx, stop := context.WithTimeout(ctx, c.giveUp)
	defer stop()
	charge, err := c.poll.GetCharge(c.observed(ctx, nil, nil), id)
	if err != nil {
		c.unexpectedf("charge %s: read: %v", id, err)
		return nil
	}
	return charge
}

func (c *client) unexpectedf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unexpected = append(c.unexpected, fmt.Sprintf(format, args...))
}

// recordAck keeps the first 201 for a key and compares later ones with it.
func (c *client) recordAck(r request, body []byte) {
	var object struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &object)
	c.mu.Lock()
	defer c.mu.Unlock()
	first, seen := c.acks[r.key]
	if !seen {
		c.acks[r.key] = ack{id: object.ID, req: r, body: append([]byte(nil), body...)}
		switch {
		case r.path == refundsPath:
			c.refundAcks++
		case r.operation():
			c.opAcks++
		default:
			c.chargeAcks++
		}
		return
	}
	if !bytes.Equal(first.body, body) {
		c.mismatches = append(c.mismatches, r.key)
	}
}

// replayAll sends every acknowledged request once more and checks the
// answer is the stored one, byte for byte.
func (c *client) replayAll(ctx context.Context) {
	c.mu.Lock()
	acks := make([]ack, 0, len(c.acks))
	for _, a := range c.acks {
		acks = append(acks, a)
	}
	c.mu.Unlock()
	for _, a := range acks {
		for range 5 {
			status, body, replayed := c.send(ctx, a.req)
			if status == http.StatusCreated {
				if !replayed {
					c.mu.Lock()
					c.mismatches = append(c.mismatches, a.req.key+" (not marked as a replay)")
					c.mu.Unlock()
				}
				c.recordAck(a.req, body)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// load runs n requests through workers concurrent clients. Requests come
// from build(i); done, when set, gets each one's final answer.
func (c *client) load(ctx context.Context, n, workers int, build func(i int) request, done func(r request, a answer)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				r := build(i)
				a := c.post(ctx, r)
				if done != nil {
					done(r, a)
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
}

// ackedCount is how many charges the client saw acknowledged.
func (c *client) ackedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chargeAcks
}

// refundAckedCount is how many refunds the client saw acknowledged.
func (c *client) refundAckedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refundAcks
}
