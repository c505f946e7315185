package bench

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// StormRequests is the size of the duplicate storm (docs/benchmarks.md).
const StormRequests = 200

// StormResult is StormRequests concurrent requests with one key: they must
// make one charge and one provider call, and none may get a 5xx.
type StormResult struct {
	Requests int `json:"requests"`
	// Statuses counts the answers by HTTP status ("0" for a transport
	// error).
	Statuses map[string]int `json:"statuses"`
	// Charges is how many charges the storm created; ChargeIDs how many
	// different charge ids the 201 answers named.
	Charges   int64 `json:"charges"`
	ChargeIDs int   `json:"charge_ids"`
	// IdenticalBodies says every 201 carried the same bytes.
	IdenticalBodies bool `json:"identical_bodies"`
	// ProviderCalls is how many charges the provider's ledger (its own
	// de-duplication off) holds for the charge's provider key, once the
	// charge settled.
	ProviderCalls int    `json:"provider_calls"`
	FinalState    string `json:"final_state"`
	// Seconds is how long the storm's requests took, first to last.
	Seconds float64 `json:"seconds"`
	// Violations says what went wrong; empty when the storm passed.
	Violations []string `json:"violations"`
	Met        bool     `json:"met"`
}

// measureStorm releases StormRequests requests with one key at once, each
// on its own connection, with the worker running; then waits for the charge
// to settle and counts what the provider was asked.
func (r *runner) measureStorm(ctx context.Context) (StormResult, error) {
	res := StormResult{Requests: StormRequests, Statuses: map[string]int{}}
	client := newAPIClient(r.sys, r.keyPrefix+"storm-", StormRequests)
	defer client.http.CloseIdleConnections()
	key := client.key(r.load.seq.Add(1))
	before, err := r.counts(ctx)
	if err != nil {
		return res, err
	}

	var (
		mu      sync.Mutex
		bodies  = map[string]int{}
		ids     = map[string]bool{}
		release = make(chan struct{})
		wg      sync.WaitGroup
	)
	for range StormRequests {
		wg.Go(func() {
			<-release
			a, err := client.post(ctx, key, true)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Statuses["0"]++
				return
			}
			res.Statuses[strconv.Itoa(a.status)]++
			if a.status == http.StatusCreated {
				bodies[string(a.body)]++
				var charge struct {
					ID string `json:"id"`
				}
				if json.Unmarshal(a.body, &charge) == nil {
					ids[charge.ID] = true
				}
			}
		})
	}
	started := time.Now()
	close(release)
	wg.Wait()
	res.Seconds = time.Since(started).Seconds()

	after, err := r.counts(ctx)
	if err != nil {
		return res, err
	}
	res.Charges = after.unsettled + after.succeeded + after.notSucceeded - before.unsettled - before.succeeded - before.notSucceeded
	res.ChargeIDs = len(ids)
	res.IdenticalBodies = len(bodies) == 1

	keyHash := sha256.Sum256([]byte(key))
	record, err := intent.Idempotency(ctx, r.admin, r.sys.TenantID, keyHash[:])
	if err != nil {
		res.Violations = append(res.Violations, "no idempotency record for the storm's key")
	} else {
		state, err := r.waitSettled(ctx, record.ChargeID, time.Minute)
		if err != nil {
			return res, err
		}
		res.FinalState = state
		if res.ProviderCalls, err = r.providerCalls(ctx, intent.ProviderKeyFor(record.ChargeID)); err != nil {
			return res, err
		}
	}

	for _, status := range slices.Sorted(maps.Keys(res.Statuses)) {
		if status == "0" || strings.HasPrefix(status, "5") {
			res.Violations = append(res.Violations, fmt.Sprintf("%d answers with status %s", res.Statuses[status], status))
		}
	}
	if res.Charges != 1 {
		res.Violations = append(res.Violations, fmt.Sprintf("%d charges created", res.Charges))
	}
	if res.ChargeIDs > 1 {
		res.Violations = append(res.Violations, fmt.Sprintf("the 201 answers named %d charges", res.ChargeIDs))
	}
	if len(bodies) > 1 {
		res.Violations = append(res.Violations, fmt.Sprintf("the 201 answers carried %d different bodies", len(bodies)))
	}
	if res.ProviderCalls != 1 {
		res.Violations = append(res.Violations, fmt.Sprintf("%d provider calls", res.ProviderCalls))
	}
	if res.FinalState != string(intent.StateSucceeded) && res.FinalState != "" {
		res.Violations = append(res.Violations, "the charge ended "+res.FinalState)
	}
	res.Met = len(res.Violations) == 0
	return res, nil
}

// waitSettled waits for a charge to reach a terminal state (or review).
func (r *runner) waitSettled(ctx context.Context, chargeID string, within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for {
		charge, err := intent.Get(ctx, r.admin, r.sys.TenantID, chargeID)
		if err != nil {
			return "", err
		}
		if charge.State.Terminal() || charge.State == intent.StateNeedsReview || time.Now().After(deadline) {
			return string(charge.State), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// providerCalls counts the provider's charges under a provider key, from
// its ledger (declines included).
func (r *runner) providerCalls(ctx context.Context, providerKey string) (int, error) {
	ledger, err := fakepsp.FetchLedger(ctx, r.sys.PSPURL, true)
	if err != nil {
		return 0, fmt.Errorf("read the provider's ledger: %w", err)
	}
	n := 0
	for _, entry := range ledger {
		if entry.IdempotencyKey == providerKey {
			n++
		}
	}
	return n, nil
}
