package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/submit"
)

// chargeBody is the request every accept sends: a realistic charge, with a
// description and metadata, parsed and fingerprinted in full by the API.
const chargeBody = `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "Order 1", "metadata": {"order": "A-1"}}`

// apiClient is a merchant's backend: keep-alive connections to the API, a
// fresh idempotency key per charge.
type apiClient struct {
	baseURL string
	apiKey  string
	// keyPrefix makes keys unique across runs on one database.
	keyPrefix string
	http      *http.Client
}

func newAPIClient(sys *System, keyPrefix string, connections int) *apiClient {
	return &apiClient{
		baseURL:   sys.APIURL,
		apiKey:    sys.APIKey,
		keyPrefix: keyPrefix,
		http:      newKeepAlive(connections),
	}
}

// newKeepAlive is an HTTP client keeping a connection per concurrent client.
func newKeepAlive(connections int) *http.Client {
	return &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: connections, MaxIdleConns: connections, IdleConnTimeout: time.Minute},
	}
}

// key is the idempotency key of sequence number seq.
func (c *apiClient) key(seq int64) string {
	return c.keyPrefix + strconv.FormatInt(seq, 10)
}

// answer is what the API said.
type answer struct {
	status   int
	replayed bool
	body     []byte
}

// post sends POST /v1/charges once. With keepBody the answer's body is
// returned; otherwise it is read and dropped.
func (c *apiClient) post(ctx context.Context, key string, keepBody bool) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+"/v1/charges", bytes.NewReader([]byte(chargeBody)))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
	if keepBody || resp.StatusCode != http.StatusCreated {
		a.body, err = io.ReadAll(resp.Body)
	} else {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	return a, err
}

// accept is one new charge through the API: the op the accept target
// measures.
func (c *apiClient) accept(ctx context.Context, seq int64) error {
	a, err := c.post(ctx, c.key(seq), false)
	if err != nil {
		return err
	}
	if a.status != http.StatusCreated || a.replayed {
		return fmt.Errorf("new key answered %d (replayed %t): %.200s", a.status, a.replayed, a.body)
	}
	return nil
}

// rawAcceptor writes accepted charges the way the API's accept does — the
// idempotency record with its stored response, the charge (through the
// charges_guard trigger and every constraint and index), its first event
// and its charge.submit River job, in intent.Accept's one statement: one
// round trip, one implicit transaction, one commit — as fast as a client of
// the database alone can, with no HTTP, no JSON parsing, no replay check.
// It is the floor the API is measured against.
type rawAcceptor struct {
	pool      *pgxpool.Pool
	tenantID  string
	keyPrefix string
}

// jobMetadata is what the TraceContext middleware stores in a job's
// metadata: the raw baseline writes as many bytes.
const jobMetadata = `{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`

func (r *rawAcceptor) accept(ctx context.Context, seq int64) error {
	description := "Order 1"
	now := time.Now().UTC().Truncate(time.Microsecond)
	id := ids.New("ch", now)
	keyHash := sha256.Sum256([]byte(r.keyPrefix + strconv.FormatInt(seq, 10)))
	fp := sha256.Sum256([]byte(chargeBody))
	job, err := submit.RowOf(ctx, submit.ChargeArgs{TenantID: r.tenantID, ChargeID: id}, submit.DefaultMaxAttempts)
	if err != nil {
		return err
	}
	job.Metadata = []byte(jobMetadata)
	inserted, err := intent.Accept(ctx, r.pool, intent.Acceptance{
		Charge: intent.Charge{
			TenantID: r.tenantID, ID: id, State: intent.StatePending,
			Amount: 1000, Currency: "USD", PaymentMethod: "pm_card_visa", Description: &description,
			Metadata: map[string]string{"order": "A-1"}, Provider: "fakepsp", ProviderKey: intent.ProviderKeyFor(id),
			CreatedAt: now, UpdatedAt: now,
		},
		Actor: "api", KeyHash: keyHash[:], Fingerprint: fp[:],
		StatusCode: http.StatusCreated, ResponseBody: responseLike(id, now), ExpiresAt: now.Add(24 * time.Hour),
		Job: job,
	})
	if err != nil {
		return fmt.Errorf("raw accept: %w", err)
	}
	if !inserted {
		return fmt.Errorf("raw accept: key %d already taken", seq)
	}
	return nil
}

// responseLike renders a body of the same shape and size as the API's 201,
// to be stored as the idempotency record's response.
func responseLike(id string, now time.Time) []byte {
	ts := now.Format(time.RFC3339Nano)
	return []byte(`{"id":"` + id + `","status":"pending","amount":1000,"currency":"USD","payment_method":"pm_card_visa",` +
		`"description":"Order 1","metadata":{"order":"A-1"},"provider_charge_id":null,"failure_code":null,"attempts":0,` +
		`"created_at":"` + ts + `","updated_at":"` + ts + `","review_reason":null}` + "\n")
}

// AcceptResult compares the API's accept throughput with the raw
// one-round-trip transaction at one concurrency.
type AcceptResult struct {
	Concurrency int `json:"concurrency"`
	// API and Raw are charges accepted per second.
	API Throughput `json:"api"`
	Raw Throughput `json:"raw"`
	// Ratio is API ÷ Raw; the target is at least AcceptTarget.
	Ratio float64 `json:"ratio"`
	// Minimal is the minimal design's accept rate (lab/bench/minimal.go);
	// MinimalRatio is API ÷ Minimal, the target at least MinimalTarget.
	Minimal      Throughput `json:"minimal"`
	MinimalRatio float64    `json:"minimal_ratio"`
	MinimalMet   bool       `json:"minimal_met"`
	// CPU is the CPU time per charge of each process involved, when it
	// could be read from /proc (Linux, Postgres on this machine).
	CPU *CPUPerOp `json:"cpu_per_charge,omitempty"`
	Met bool      `json:"met"`
}

// Throughput is a closed-loop load's outcome.
type Throughput struct {
	Ops       int64   `json:"ops"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	// Failures are ops that did not get the expected answer; FirstFailure
	// says what the first one got.
	Failures     int64  `json:"failures"`
	FirstFailure string `json:"first_failure,omitempty"`
}

func throughputOf(t tally) Throughput {
	return Throughput{Ops: t.ops, Seconds: t.elapsed.Seconds(), PerSecond: t.perSecond(), Failures: t.failures, FirstFailure: t.firstFailure}
}

// CPUPerOp is CPU time per op, in microseconds, by process. Client is this
// process (the load generator, plus the in-process API when there is one),
// API the API's process, Postgres the backends serving the benchmark's
// database.
type CPUPerOp struct {
	APIClient   float64 `json:"api_leg_client_us"`
	API         float64 `json:"api_leg_api_us"`
	APIPostgres float64 `json:"api_leg_postgres_us"`
	RawClient   float64 `json:"raw_leg_client_us"`
	RawPostgres float64 `json:"raw_leg_postgres_us"`
	// MinimalClient is this process serving the minimal design and
	// loading it; MinimalPostgres its backends.
	MinimalClient   float64 `json:"minimal_leg_client_us"`
	MinimalPostgres float64 `json:"minimal_leg_postgres_us"`
}

// acceptRounds is how many times the accept measurement runs its six
// legs. In one round the minimal design's two legs are adjacent and sample
// one stretch of a machine shared with its neighbours, while the others'
// sit at the round's two ends (docs/benchmarks.md, "What each line
// measures", has the runs that showed it).
const acceptRounds = 2

// measureAccept runs the raw baseline, the API and the minimal design in
// turn — raw, API, minimal, minimal, API, raw, twice, a quarter of the
// duration each (acceptRounds) — so that a drift over the run (the tables
// growing, a checkpoint) weighs on each alike, and a fast or slow stretch
// of a machine shared with its neighbours falls on one leg's quarter, not
// its half. Each leg starts with an unmeasured warm-up at the same
// concurrency.
func (r *runner) measureAccept(ctx context.Context, concurrency int) (AcceptResult, error) {
	pool, err := openPool(ctx, r.sys.DatabaseURL, "bench-raw", concurrency)
	if err != nil {
		return AcceptResult{}, err
	}
	defer pool.Close()
	raw := &rawAcceptor{pool: pool, tenantID: r.sys.TenantID, keyPrefix: r.keyPrefix + "raw-"}
	client := newAPIClient(r.sys, r.keyPrefix+"accept-", concurrency)
	defer client.http.CloseIdleConnections()
	minimalPool, err := openPool(ctx, r.sys.DatabaseURL, "bench-minimal", concurrency)
	if err != nil {
		return AcceptResult{}, err
	}
	defer minimalPool.Close()
	minimal, stopMinimal, err := startMinimal(minimalPool, r.keyPrefix+"minimal-", concurrency)
	if err != nil {
		return AcceptResult{}, err
	}
	defer func() { _ = stopMinimal(context.WithoutCancel(ctx)) }()
	defer minimal.http.CloseIdleConnections()

	res := AcceptResult{Concurrency: concurrency}
	var apiTally, rawTally, minimalTally tally
	var apiCPU, rawCPU, minimalCPU cpuSample
	leg := func(fn op, total *tally, cpu *cpuSample) error {
		r.load.run(ctx, loadOptions{concurrency: concurrency, until: r.warmup()}, fn)
		before, err := r.cpu(ctx)
		if err != nil {
			return err
		}
		t := r.load.run(ctx, loadOptions{concurrency: concurrency, until: r.part(2 * acceptRounds)}, fn)
		after, err := r.cpu(ctx)
		if err != nil {
			return err
		}
		*total = total.add(t)
		*cpu = cpu.add(after.sub(before))
		return ctx.Err()
	}
	type step struct {
		fn    op
		total *tally
		cpu   *cpuSample
	}
	rawStep, apiStep, minimalStep := step{raw.accept, &rawTally, &rawCPU}, step{client.accept, &apiTally, &apiCPU},
		step{minimalAccept(minimal), &minimalTally, &minimalCPU}
	for range acceptRounds {
		for _, s := range []step{rawStep, apiStep, minimalStep, minimalStep, apiStep, rawStep} {
			if err := leg(s.fn, s.total, s.cpu); err != nil {
				return AcceptResult{}, err
			}
		}
	}
	res.API, res.Raw, res.Minimal = throughputOf(apiTally), throughputOf(rawTally), throughputOf(minimalTally)
	if res.Raw.PerSecond > 0 {
		res.Ratio = res.API.PerSecond / res.Raw.PerSecond
	}
	if res.Minimal.PerSecond > 0 {
		res.MinimalRatio = res.API.PerSecond / res.Minimal.PerSecond
	}
	res.Met = res.Ratio >= AcceptTarget && res.API.Failures == 0 && res.Raw.Failures == 0
	res.MinimalMet = res.MinimalRatio >= MinimalTarget && res.API.Failures == 0 && res.Minimal.Failures == 0
	if apiCPU.known && rawCPU.known && minimalCPU.known && apiTally.ops > 0 && rawTally.ops > 0 && minimalTally.ops > 0 {
		res.CPU = &CPUPerOp{
			APIClient:       apiCPU.self.perOp(apiTally.ops),
			API:             apiCPU.api.perOp(apiTally.ops),
			APIPostgres:     apiCPU.postgres.perOp(apiTally.ops),
			RawClient:       rawCPU.self.perOp(rawTally.ops),
			RawPostgres:     rawCPU.postgres.perOp(rawTally.ops),
			MinimalClient:   minimalCPU.self.perOp(minimalTally.ops),
			MinimalPostgres: minimalCPU.postgres.perOp(minimalTally.ops),
		}
	}
	return res, nil
}
