// Package submit owns the River jobs that carry work to a provider: their
// arguments, their metadata (the trace context), their insertion in a
// caller's transaction, the wake-up of River's workers, and the row that a
// one-statement writer (the API's accept) puts in River's job table itself.
// Every job chargeflow inserts goes through a Queue, so its max attempts, its
// metadata and its wake-up are decided in one place, whoever inserts it
// (docs/architecture.md, "The submit job").
//
// A job holds identifiers only. The row it names (a charge) is the truth: a
// job that runs twice, or late, reads the row and acts on what it finds.
// River delivers at least once, so correctness never rests on job state.
package submit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/chargeflow/chargeflow/intent"
)

// KindCharge is the kind of the job that carries one charge to its provider.
const KindCharge = "charge.submit"

// ChargeArgs are the arguments of a charge.submit job.
type ChargeArgs struct {
	TenantID string `json:"tenant_id"`
	ChargeID string `json:"charge_id"`
}

// Kind is the River job kind.
func (ChargeArgs) Kind() string { return KindCharge }

// DefaultMaxAttempts is how many times River runs a submit job before it
// gives up. A run ends in error only when the provider provably did not
// apply the request, so with the worker's backoff (1 s doubling, capped at
// 5 min) ten attempts keep a charge the provider keeps refusing for about
// eight and a half minutes before it fails as provider_unavailable.
const DefaultMaxAttempts = 10

// The job row River's insert writes, which Row reproduces; see Row.
const (
	queueName = river.QueueDefault
	priority  = 1
	wakeTopic = "river_insert"
)

// Config configures a Queue. Zero values take the defaults.
type Config struct {
	// River inserts the jobs; an insert-only client (no queues) is enough.
	// Give it Middleware(), as every River client of ours has.
	River *river.Client[pgx.Tx]
	// MaxAttempts is every submit job's max_attempts. Default
	// DefaultMaxAttempts.
	MaxAttempts int
	// WakeCooldown is the least time between two wake-ups (River's insert
	// notification, a pg_notify) that Row asks for (each wakes the workers at once; between two, they
	// find new jobs by polling or by the next one). Default River's fetch
	// cooldown, 100 ms, which is how River's own client limits them.
	WakeCooldown time.Duration
}

// Queue inserts submit jobs. Its methods are safe for concurrent use.
type Queue struct {
	cfg Config
	// lastWake is when Row last asked for a wake-up, in Unix
	// nanoseconds.
	lastWake atomic.Int64
}

// NewQueue checks cfg and fills its defaults.
func NewQueue(cfg Config) (*Queue, error) {
	if cfg.River == nil {
		return nil, errors.New("submit: a River client is required")
	}
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, DefaultMaxAttempts)
	if cfg.MaxAttempts < 1 {
		return nil, fmt.Errorf("submit: max attempts %d, want at least 1", cfg.MaxAttempts)
	}
	cfg.WakeCooldown = cmp.Or(cfg.WakeCooldown, river.FetchCooldownDefault)
	return &Queue{cfg: cfg}, nil
}

// MaxAttempts is the max_attempts of every job this queue inserts.
func (q *Queue) MaxAttempts() int { return q.cfg.MaxAttempts }

// Enqueue inserts a job in the caller's transaction: it exists exactly when
// the transaction that made its row pending commits.
func (q *Queue) Enqueue(ctx context.Context, tx pgx.Tx, args river.JobArgs) error {
	if _, err := q.cfg.River.InsertTx(ctx, tx, args, &river.InsertOpts{MaxAttempts: q.cfg.MaxAttempts}); err != nil {
		return fmt.Errorf("insert %s job: %w", args.Kind(), err)
	}
	return nil
}

// Row is the job Enqueue would insert under ctx, as a row for a caller that
// writes it in its own statement (intent.Accept, whose charge and job then
// commit in one round trip); see RowOf. It asks for a wake-up (River's
// insert notification) at most once per WakeCooldown, as River's client does:
// under load the workers are awake anyway, and a lone charge wakes them at
// once.
func (q *Queue) Row(ctx context.Context, args river.JobArgs, now time.Time) (*intent.JobRow, error) {
	row, err := RowOf(ctx, args, q.cfg.MaxAttempts)
	if err != nil {
		return nil, err
	}
	if q.wakeDue(now) {
		row.WakeTopic = wakeTopic
		row.WakePayload = `{"queue": "` + queueName + `"}`
	}
	return row, nil
}

// RowOf is the row River's insert writes for args under ctx, without a
// wake-up. River documents its job table as the insert interface for
// clients in other languages; the row carries what River's insert writes —
// kind, args, queue "default", priority 1, max attempts, and the trace
// context of Middleware — and a test holds the two to the same row.
func RowOf(ctx context.Context, args river.JobArgs, maxAttempts int) (*intent.JobRow, error) {
	encoded, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("encode %s args: %w", args.Kind(), err)
	}
	return &intent.JobRow{
		Kind:        args.Kind(),
		Args:        encoded,
		Queue:       queueName,
		Priority:    priority,
		MaxAttempts: maxAttempts,
		Metadata:    Metadata(ctx),
	}, nil
}

// wakeDue reports whether a row made now should carry the wake-up.
func (q *Queue) wakeDue(now time.Time) bool {
	last := q.lastWake.Load()
	if now.UnixNano()-last < int64(q.cfg.WakeCooldown) {
		return false
	}
	return q.lastWake.CompareAndSwap(last, now.UnixNano())
}
