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

// client is the merchant's backend as a careful engineer writes it: one
// idempotency key per charge, chosen before the first attempt, and retries
// with that same key on every error, timeout, 409, 429 and 5xx until a final
// answer. It remembers every 201 it saw, to check that each has a row and
// that every replay is byte-identical to the first answer.
type client struct {
	baseURL func() string
	apiKey  string
	http    *http.Client
	// giveUp bounds the retries of one charge.
	giveUp time.Duration

	mu       sync.Mutex
	acks     map[string]ack // by idempotency key
	statuses map[int]int
	sent     int
	retries  int
	// mismatches lists keys whose replay differed from the first 201.
	mismatches []string
	// unexpected lists answers a valid request should never get.
	unexpected []string
}

// ack is a 201 the client saw.
type ack struct {
	chargeID string
	body     []byte
}

func newClient(baseURL func() string, apiKey string, timeout, giveUp time.Duration) *client {
	return &client{
		baseURL:  baseURL,
		apiKey:   apiKey,
		http:     &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		giveUp:   giveUp,
		acks:     map[string]ack{},
		statuses: map[int]int{},
	}
}

// chargeRequest is one charge the traffic generator sends.
type chargeRequest struct {
	key  string
	body []byte
}

// send POSTs one request once and returns the status (0 for a transport
// error) and the body.
func (c *client) send(ctx context.Context, key string, body []byte) (int, []byte, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL()+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return 0, nil, false
	}
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	c.mu.Lock()
	c.sent++
	c.mu.Unlock()
	if err != nil {
		return 0, nil, false
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, false
	}
	c.mu.Lock()
	c.statuses[resp.StatusCode]++
	c.mu.Unlock()
	return resp.StatusCode, data, resp.Header.Get("Idempotent-Replayed") == "true"
}

// charge sends r until it gets a final answer, retrying with the same key.
// It returns the final status (0 if it gave up).
func (c *client) charge(ctx context.Context, r chargeRequest) int {
	deadline := time.Now().Add(c.giveUp)
	backoff := 20 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			c.mu.Lock()
			c.retries++
			c.mu.Unlock()
		}
		status, body, _ := c.send(ctx, r.key, r.body)
		switch {
		case status == http.StatusCreated:
			c.recordAck(r.key, body)
			return status
		case status == 0, status == http.StatusConflict, status == http.StatusTooManyRequests, status >= 500:
			// Unknown or transient: the same key again, after a pause.
		default:
			c.mu.Lock()
			c.unexpected = append(c.unexpected, fmt.Sprintf("%s: %d %s", r.key, status, bytes.TrimSpace(body)))
			c.mu.Unlock()
			return status
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(backoff + time.Duration(rand.Int64N(int64(backoff)))):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// recordAck keeps the first 201 for a key and compares later ones with it.
func (c *client) recordAck(key string, body []byte) {
	var charge struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &charge)
	c.mu.Lock()
	defer c.mu.Unlock()
	first, seen := c.acks[key]
	if !seen {
		c.acks[key] = ack{chargeID: charge.ID, body: append([]byte(nil), body...)}
		return
	}
	if !bytes.Equal(first.body, body) {
		c.mismatches = append(c.mismatches, key)
	}
}

// replayAll sends every acknowledged request once more and checks the
// answer is the stored one, byte for byte.
func (c *client) replayAll(ctx context.Context, requests map[string][]byte) {
	c.mu.Lock()
	keys := make([]string, 0, len(c.acks))
	for k := range c.acks {
		keys = append(keys, k)
	}
	c.mu.Unlock()
	for _, key := range keys {
		for range 5 {
			status, body, replayed := c.send(ctx, key, requests[key])
			if status == http.StatusCreated {
				if !replayed {
					c.mu.Lock()
					c.mismatches = append(c.mismatches, key+" (not marked as a replay)")
					c.mu.Unlock()
				}
				c.recordAck(key, body)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// load runs n charges through workers concurrent clients, calling progress
// after each. Requests come from request(i).
func (c *client) load(ctx context.Context, n, workers int, request func(i int) chargeRequest, progress func()) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				c.charge(ctx, request(i))
				if progress != nil {
					progress()
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

func (c *client) ackedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.acks)
}
