package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// The routes the merchant's backend posts to.
const (
	chargesPath = "/v1/charges"
	refundsPath = "/v1/refunds"
)

// The refusals of a refund that are final answers (docs/api.md, "Refunds"):
// nothing was stored, and the same request would be refused again.
const (
	codeChargeNotRefundable = "charge_not_refundable"
	codeRefundExceedsCharge = "refund_exceeds_charge"
	codeRequestInProgress   = "request_in_progress"
)

// client is the merchant's backend as a careful engineer writes it: one
// idempotency key per charge or refund, chosen before the first attempt, and
// retries with that same key on every transport error, 409
// request_in_progress, 429 and 5xx until a final answer. It remembers every
// 201 it saw, to check that each has a row and that every replay is
// byte-identical to the first answer, and counts the refusals of refunds.
type client struct {
	baseURL func() string
	apiKey  string
	http    *http.Client
	// giveUp bounds the retries of one request.
	giveUp time.Duration

	mu         sync.Mutex
	acks       map[string]ack // by idempotency key
	chargeAcks int
	refundAcks int
	// refusals counts the final refusals of refunds, by problem code.
	refusals map[string]int
	statuses map[int]int
	sent     int
	// mismatches lists keys whose replay differed from the first 201.
	mismatches []string
	// unexpected lists answers a valid request should never get.
	unexpected []string
}

// request is one POST the merchant sends: a charge or a refund, under the
// key it chose before the first attempt.
type request struct {
	path string
	key  string
	body []byte
}

// answer is the final answer to a request: its status (0 if the client
// gave up), the problem's code for a refusal, and the body.
type answer struct {
	status int
	code   string
	body   []byte
}

// ack is a 201 the client saw, and the request it answered.
type ack struct {
	id   string
	req  request
	body []byte
}

func newClient(baseURL func() string, apiKey string, timeout, giveUp time.Duration) *client {
	return &client{
		baseURL:  baseURL,
		apiKey:   apiKey,
		http:     &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		giveUp:   giveUp,
		acks:     map[string]ack{},
		refusals: map[string]int{},
		statuses: map[int]int{},
	}
}

// send POSTs r once and returns the status (0 for a transport error), the
// body and whether the answer is marked as a replay.
func (c *client) send(ctx context.Context, r request) (int, []byte, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL()+r.path, bytes.NewReader(r.body))
	if err != nil {
		return 0, nil, false
	}
	req.Header.Set("Idempotency-Key", r.key)
	req.Header.Set("Content-Type", "application/json")
	c.mu.Lock()
	c.sent++
	c.mu.Unlock()
	status, data, header := c.do(req)
	return status, data, header.Get("Idempotent-Replayed") == "true"
}

// get GETs path once: the status (0 for a transport error) and the body.
func (c *client) get(ctx context.Context, path string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL()+path, nil)
	if err != nil {
		return 0, nil
	}
	status, data, _ := c.do(req)
	return status, data
}

// do sends req with the tenant's key and counts the answer's status.
func (c *client) do(req *http.Request) (int, []byte, http.Header) {
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil
	}
	c.mu.Lock()
	c.statuses[resp.StatusCode]++
	c.mu.Unlock()
	return resp.StatusCode, data, resp.Header
}

// problemCode is the code of a problem document, or "".
func problemCode(body []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &p)
	return p.Code
}

// transient reports whether an answer says nothing final: the same request
// again, with the same key, after a pause.
func transient(status int, code string) bool {
	return status == 0 || status == http.StatusConflict && code == codeRequestInProgress ||
		status == http.StatusTooManyRequests || status >= 500
}

// post sends r until it gets a final answer, retrying with the same key:
// a 201, a refund's refusal (counted), or anything else, which a valid
// request never gets (recorded as unexpected). The status is 0 if it gave
// up.
func (c *client) post(ctx context.Context, r request) answer {
	var a answer
	c.retry(ctx, 20*time.Millisecond, time.Second, func() bool {
		a = answer{}
		a.status, a.body, _ = c.send(ctx, r)
		if a.status >= 400 {
			a.code = problemCode(a.body)
		}
		switch {
		case a.status == http.StatusCreated:
			c.recordAck(r, a.body)
		case transient(a.status, a.code):
			return false
		case r.path == refundsPath && a.status == http.StatusConflict &&
			(a.code == codeChargeNotRefundable || a.code == codeRefundExceedsCharge):
			c.mu.Lock()
			c.refusals[a.code]++
			c.mu.Unlock()
		default:
			c.unexpectedf("key %s: %d %s", redactKey(r.key), a.status, bytes.TrimSpace(a.body))
		}
		return true
	})
	if transient(a.status, a.code) {
		a.status = 0 // gave up
	}
	return a
}

// retry calls attempt until it reports a final answer, with a jittered
// backoff from base to limit between attempts, for at most giveUp.
func (c *client) retry(ctx context.Context, base, limit time.Duration, attempt func() (final bool)) {
	deadline := time.Now().Add(c.giveUp)
	backoff := base
	for !attempt() {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff + time.Duration(rand.Int64N(int64(backoff)))):
		}
		backoff = min(2*backoff, limit)
	}
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
		if r.path == refundsPath {
			c.refundAcks++
		} else {
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
