// Package accept accepts what a merchant asks for once per idempotency key:
// a charge, or a refund, capture or cancel of one, written with its
// idempotency record, its first event and its charge.submit job in one
// statement — one round trip, one transaction, one commit, shared with the
// charges that arrive while the previous statement runs (batch.go). It
// keeps the records it wrote or read last, to answer retries without a
// database read (replaycache.go), and lets the requests that act on one
// charge take turns (turns.go).
//
// It knows nothing of HTTP: the API parses a request into an
// intent.Acceptance, calls Accept, and renders what it returns.
package accept

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/batch"
	"github.com/chargeflow/chargeflow/internal/pg"
)

// MetricAcceptBatch is the number of charges each accept statement wrote
// together (docs/architecture.md, "Accepts share a commit"): 1 when the
// API is quiet, deeper as it gets busier.
const MetricAcceptBatch = "chargeflow.api.accept_batch_size"

// instrumentationName names the meter of this package.
const instrumentationName = "github.com/chargeflow/chargeflow/accept"

// Config is everything an Acceptor needs. Zero values take the defaults.
type Config struct {
	// DB is the pool accepts are written on. Its sessions should set a
	// short lock_timeout: an accept that waits longer than that for
	// another holding the same idempotency key fails with the lock's
	// error, which the API answers 409 + Retry-After.
	DB *pgxpool.Pool
	// Logger receives the warning of a batch that failed.
	Logger *slog.Logger
	// CrashPoints are armed in tests and scenarios only; nil is disarmed.
	CrashPoints *crashpoint.Set
	// ReplayCache is how many idempotency records this process keeps in
	// memory, the ones it wrote or read last, to answer retries without a
	// database read (docs/api.md, "Replays"). Default 10,000 (a few MB);
	// negative keeps none.
	ReplayCache int
	// Batches is how many accept statements this process runs at most at
	// once. The charges that arrive while one runs are accepted together
	// by the next, in one statement and one commit; another statement
	// starts beside it only when a full batch waits (docs/architecture.md,
	// "Accepts share a commit"). Default 4; negative sends every accept in
	// a statement of its own.
	Batches int
	// MeterProvider records MetricAcceptBatch. Nil means no metrics.
	MeterProvider metric.MeterProvider
}

// Defaults is the configuration New fills zero fields from.
func Defaults() Config {
	return Config{ReplayCache: 10_000, Batches: 4}
}

// Acceptor accepts charges and refunds once per idempotency key.
type Acceptor struct {
	cfg Config
	// replays keeps recent idempotency records (Config.ReplayCache).
	replays *replayCache
	// batches batches new charges (Config.Batches); nil sends each alone.
	batches *batch.Batcher[intent.Acceptance, acceptAnswer]
	// turns lets the requests that act on one charge go one at a time.
	turns     *turns
	batchSize metric.Int64Histogram
}

// New fills in defaults and builds an Acceptor.
func New(cfg Config) (*Acceptor, error) {
	if cfg.DB == nil {
		return nil, errors.New("accept: DB is required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	d := Defaults()
	cfg.ReplayCache = cmp.Or(cfg.ReplayCache, d.ReplayCache)
	cfg.Batches = cmp.Or(cfg.Batches, d.Batches)
	mp := cfg.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	batchSize, err := mp.Meter(instrumentationName).Int64Histogram(MetricAcceptBatch,
		metric.WithDescription("Charges accepted together by one statement and one commit."),
		metric.WithUnit("{charge}"),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128))
	if err != nil {
		return nil, fmt.Errorf("accept: metric %s: %w", MetricAcceptBatch, err)
	}
	a := &Acceptor{cfg: cfg, replays: newReplayCache(cfg.ReplayCache), turns: newTurns(), batchSize: batchSize}
	if cfg.Batches > 0 {
		a.batches = batch.NewParallel(maxAcceptBatch, cfg.Batches, a.acceptBatch)
	}
	return a, nil
}

// Cached returns the record a tenant stored under a key hash, if this
// process keeps it and it has not expired at now.
func (a *Acceptor) Cached(tenantID string, keyHash [32]byte, now time.Time) (intent.IdempotencyRecord, bool) {
	return a.replays.get(tenantID, keyHash, now)
}

// Remember keeps a committed record, to answer the key's retries.
func (a *Acceptor) Remember(tenantID string, keyHash [32]byte, rec intent.IdempotencyRecord) {
	a.replays.put(tenantID, keyHash, rec)
}

// Record reads the record a tenant stored under a key hash, one
// primary-key read, and keeps it; found is false when the key has none.
func (a *Acceptor) Record(ctx context.Context, tenantID string, keyHash [32]byte) (rec intent.IdempotencyRecord, found bool, err error) {
	err = pg.Confirmed(ctx, func(ctx context.Context) error {
		rec, err = intent.ReplayRecord(ctx, a.cfg.DB, tenantID, keyHash[:])
		return err
	})
	switch {
	case err == nil:
		a.replays.put(tenantID, keyHash, rec)
		return rec, true, nil
	case errors.Is(err, intent.ErrNotFound):
		return intent.IdempotencyRecord{}, false, nil
	}
	return intent.IdempotencyRecord{}, false, err
}

// Turn waits until key's turn comes (turns.go) or ctx is done, and returns
// the function that passes the turn on. The refunds, captures and cancels
// of one charge take turns under the charge's key.
func (a *Acceptor) Turn(ctx context.Context, key string) (release func(), err error) {
	return a.turns.wait(ctx, key)
}

// Accept writes an accepted charge or refund — the idempotency record, the
// row, its event and its charge.submit job — in one statement that is its
// own transaction and also its replay check: one round trip, one commit.
// If the key was taken, it returns that request's record instead, having
// written nothing. Either record is kept (Cached).
//
// The crash point between the writes and the commit needs a moment between
// them, so while it is armed the same statement runs in an explicit
// transaction; otherwise there is no such moment to crash in.
func (a *Acceptor) Accept(ctx context.Context, acc intent.Acceptance) (intent.IdempotencyRecord, bool, error) {
	var rec intent.IdempotencyRecord
	var inserted bool
	err := pg.Confirmed(ctx, func(ctx context.Context) (err error) {
		rec, inserted, err = a.acceptOnce(ctx, acc)
		return err
	})
	if err != nil {
		return rec, inserted, a.whoseLock(ctx, acc, err)
	}
	keyHash := [32]byte(acc.KeyHash)
	if inserted {
		a.replays.put(acc.Charge.TenantID, keyHash, intent.IdempotencyRecord{Fingerprint: acc.Fingerprint, ChargeID: acc.Charge.ID,
			StatusCode: acc.StatusCode, ResponseBody: acc.ResponseBody, CreatedAt: acc.Charge.CreatedAt, ExpiresAt: acc.ExpiresAt})
	} else {
		a.replays.put(acc.Charge.TenantID, keyHash, rec)
	}
	return rec, inserted, nil
}

// ErrBusy is an accept that gave up waiting for a lock its key does not
// hold — a sibling refund's charge, or PostgreSQL's queue of notifications
// while a commit holding it waits for the synchronous standby — so it
// wrote nothing, and no request with its key is in flight: answering
// request_in_progress would tell the client something false.
var ErrBusy = errors.New("accept: the database was too busy to take the request in time")

// keyProbeWait bounds KeyInFlight's own wait.
const keyProbeWait = 100 * time.Millisecond

// whoseLock tells apart the lock timeouts of err: one on acc's own key,
// held by a request still in flight, stays as it is (request_in_progress);
// any other becomes ErrBusy.
func (a *Acceptor) whoseLock(ctx context.Context, acc intent.Acceptance, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		return err
	}
	held, probeErr := intent.KeyInFlight(ctx, a.cfg.DB, acc.Charge.TenantID, acc.KeyHash, keyProbeWait)
	if probeErr != nil || held {
		return err
	}
	return fmt.Errorf("%w (%v)", ErrBusy, err)
}

// acceptOnce is Accept without the cache and the confirmation: committed
// when it returns.
func (a *Acceptor) acceptOnce(ctx context.Context, acc intent.Acceptance) (intent.IdempotencyRecord, bool, error) {
	if acc.Charge.ParentID != "" || a.cfg.CrashPoints.Has(crashpoint.APIAfterInsertBeforeCommit) {
		return a.acceptInTx(ctx, acc)
	}
	return a.acceptTry(ctx, acc, 1)
}

// vanishedTries bounds how many times an accept whose key's record
// vanished after the statement waited on it (replayAfterWait) is tried.
const vanishedTries = 3

// acceptTry is acceptOnce's statement, the try'th time.
func (a *Acceptor) acceptTry(ctx context.Context, acc intent.Acceptance, try int) (intent.IdempotencyRecord, bool, error) {
	var got intent.Accepted
	var err error
	alone := a.batches == nil || !acc.Batchable()
	if !alone {
		var ans acceptAnswer
		ans, err = a.batches.Do(ctx, acc)
		got = ans.Accepted
		err = cmp.Or(err, ans.err)
		alone = errors.Is(err, errAcceptAlone)
	}
	if alone {
		got.Inserted, got.Record, got.Found, err = intent.AcceptOrReplay(ctx, a.cfg.DB, acc)
	}
	rec := got.Record
	if err != nil || got.Inserted || got.Found {
		return rec, got.Inserted, err
	}
	return a.replayAfterWait(ctx, acc, try)
}

// replayAfterWait reads the record of acc's key after the accept
// statement waited on the key's first request and saw it commit. The read
// is a statement of its own, maybe on another connection, and the record
// can be gone by then: its commit was local to a primary cut off from its
// synchronous standby (never confirmed, so never answered 201) and the
// read went to the promoted one, or it expired and was deleted. Either
// way nothing holds the key now, and the request is tried again, up to
// vanishedTries; a 404 would say there is no such charge, which is not
// what happened.
func (a *Acceptor) replayAfterWait(ctx context.Context, acc intent.Acceptance, try int) (intent.IdempotencyRecord, bool, error) {
	rec, err := intent.ReplayRecord(ctx, a.cfg.DB, acc.Charge.TenantID, acc.KeyHash)
	switch {
	case !errors.Is(err, intent.ErrNotFound):
		return rec, false, err
	case try < vanishedTries:
		return a.acceptTry(ctx, acc, try+1)
	}
	return rec, false, fmt.Errorf("%w: the record of the key the accept waited on vanished %d times", ErrBusy, try)
}

// acceptInTx is Accept in an explicit transaction, with the crash point
// APIAfterInsertBeforeCommit between the statement and the commit. A
// refund's, capture's or cancel's transaction first waits for its charge's
// row (intent.LockForRefund).
func (a *Acceptor) acceptInTx(ctx context.Context, acc intent.Acceptance) (intent.IdempotencyRecord, bool, error) {
	tx, err := a.cfg.DB.Begin(ctx)
	if err != nil {
		return intent.IdempotencyRecord{}, false, fmt.Errorf("begin accept: %w", err)
	}
	// Rollback after Commit is a no-op; after a failure it must still run
	// even if ctx is done, or the connection goes back to the pool mid-tx.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if acc.Charge.ParentID != "" {
		if err := intent.LockForRefund(ctx, tx, acc.Charge.TenantID, acc.Charge.ParentID); err != nil {
			return intent.IdempotencyRecord{}, false, err
		}
	}

	inserted, err := intent.Accept(ctx, tx, acc)
	if err != nil {
		return intent.IdempotencyRecord{}, false, err
	}
	if !inserted {
		// Committed, not rolled back: the record's lock makes the commit
		// wait for the standby (intent.ReplayRecord).
		rec, err := intent.ReplayRecord(ctx, tx, acc.Charge.TenantID, acc.KeyHash)
		if err == nil {
			err = tx.Commit(ctx)
		}
		return rec, false, err
	}
	if err := a.cfg.CrashPoints.Hit(ctx, crashpoint.APIAfterInsertBeforeCommit); err != nil {
		return intent.IdempotencyRecord{}, false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return intent.IdempotencyRecord{}, false, fmt.Errorf("commit accept: %w", intent.CommitFailed(err))
	}
	return intent.IdempotencyRecord{}, true, nil
}
