package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// SeedShape is what Seed writes, besides the charges: the few charges still
// on their way, which a live system holds however old it is, and the share
// of the rest that failed or were refunded.
type SeedShape struct {
	// Tenants share the charges round robin.
	Tenants int
	// Span is how far back the oldest charge was accepted; the newest was
	// accepted a minute ago.
	Span time.Duration
	// The newest charges are left in flight, in these numbers, newest
	// first: pending (each with a live charge.submit job), submitting
	// (sent a minute before the seed, as by a worker that died mid-call:
	// the reconciler's lease takes them however long the seeding took, so
	// it does the same work at every size), unknown, needs_review.
	Pending, Submitting, Unknown, NeedsReview int
	// FailedPercent of the settled charges failed (declined); one in
	// RefundEvery succeeded charges has a succeeded refund of half.
	FailedPercent int
	RefundEvery   int
	// KeyTTL is the idempotency records' lifetime. The newest charges and
	// refunds keep their records: those of the last KeyTTL, alive, and
	// ExpiredKeys more, expired, which the next retention run deletes; the
	// older ones' records are gone, as earlier runs would have left them.
	KeyTTL      time.Duration
	ExpiredKeys int
}

// DefaultSeedShape is a few months of traffic of a hundred merchants.
var DefaultSeedShape = SeedShape{Tenants: 100, Span: 90 * 24 * time.Hour, Pending: 200, Submitting: 50, Unknown: 100,
	NeedsReview: 100, FailedPercent: 8, RefundEvery: 50, KeyTTL: 24 * time.Hour, ExpiredKeys: 1_000_000}

// seedChunk is how many charges one round of statements writes.
const seedChunk = 200_000

// Seed writes n charges with SQL, as the system would have written them:
// each is inserted pending and moved along the state machine by UPDATEs,
// so charges_guard checks every move, the events trigger writes every
// settling move's event and the refunds trigger keeps every charge's
// refund sums; every move has its audit event, every pending charge its
// job, the newest charges and refunds their idempotency records
// (SeedShape.ExpiredKeys). Nothing is disabled. Chunks of seedChunk
// charges are written by as many connections at once as the pool and the
// CPUs allow. It returns the tenant ids.
func Seed(ctx context.Context, db *pgxpool.Pool, n int, shape SeedShape, progress io.Writer) ([]string, error) {
	if progress == nil {
		progress = io.Discard
	}
	inFlight := shape.Pending + shape.Submitting + shape.Unknown + shape.NeedsReview
	if n < inFlight {
		return nil, fmt.Errorf("bench: seed %d charges: fewer than the %d in flight", n, inFlight)
	}
	rows, err := db.Query(ctx, `INSERT INTO tenants (id, name)
		SELECT 'tn_' || substr(md5(random()::text), 1, 26),
			'seed-' || t || '-' || md5(random()::text)
		FROM generate_series(1, $1) t RETURNING id`, shape.Tenants)
	if err != nil {
		return nil, fmt.Errorf("seed tenants: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("seed tenants: %w", err)
	}
	end := time.Now().Add(-time.Minute)
	start := end.Add(-shape.Span)
	step := shape.Span / time.Duration(n)
	// The idempotency records retention has not deleted yet: those of the
	// last KeyTTL, alive, and ExpiredKeys more.
	keyed := min(n, int(shape.KeyTTL/max(step, time.Microsecond))+shape.ExpiredKeys)
	began := time.Now()
	var mu sync.Mutex
	seeded := 0
	chunks := make(chan int)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(chunks)
		for lo := 1; lo <= n; lo += seedChunk {
			select {
			case chunks <- lo:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	for range max(1, min(int(db.Config().MaxConns), runtime.NumCPU(), (n+seedChunk-1)/seedChunk)) {
		g.Go(func() error {
			conn, err := db.Acquire(gctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if err := seedSession(gctx, conn.Conn()); err != nil {
				return fmt.Errorf("seed: %w", err)
			}
			for lo := range chunks {
				hi := min(lo+seedChunk-1, n)
				if err := seedRange(gctx, conn.Conn(), tenants, lo, hi, n, keyed, start, step, shape); err != nil {
					return fmt.Errorf("seed charges %d-%d: %w", lo, hi, err)
				}
				mu.Lock()
				seeded += hi - lo + 1
				fmt.Fprintf(progress, "seeded %d of %d charges (%s)\n", seeded, n, time.Since(began).Round(time.Second))
				mu.Unlock()
			}
			_, err = conn.Exec(gctx, `DROP TABLE seed_chunk, seed_parent`)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if _, err := db.Exec(ctx, `VACUUM ANALYZE charges, charge_audit, idempotency_keys, events, river_job`); err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	fmt.Fprintf(progress, "seeded and analyzed %d charges in %s\n", n, time.Since(began).Round(time.Second))
	return tenants, nil
}

// seedSession makes a connection's temporary id function and tables.
func seedSession(ctx context.Context, conn *pgx.Conn) error {
	for _, q := range []string{
		// Ids as package ids makes them: 48 bits of milliseconds in the
		// first ten base32 digits (after two zero bits), then 80 random
		// bits; these take the random part from md5, whose hex digits are
		// base32 digits too.
		`CREATE OR REPLACE FUNCTION pg_temp.seed_id(prefix text, at timestamptz) RETURNS text LANGUAGE sql VOLATILE AS $$
	SELECT prefix || '_' || (SELECT string_agg(substr('0123456789abcdefghjkmnpqrstvwxyz',
			(((floor(extract(epoch FROM at) * 1000))::bigint >> (5 * (9 - k))) & 31)::int + 1, 1), '' ORDER BY k)
		FROM generate_series(0, 9) k)
		|| substr(md5(random()::text || clock_timestamp()::text), 1, 16)
$$`,
		`CREATE TEMP TABLE seed_chunk (seq bigint PRIMARY KEY, tenant_id text, id text, created_at timestamptz, fate text)`,
		`CREATE TEMP TABLE seed_parent (seq bigint PRIMARY KEY, tenant_id text, id text, amount bigint)`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// seedRange writes the charges lo..hi of n, numbered oldest first.
// Charges (and their refunds) after seq n-keyed keep their idempotency
// records.
func seedRange(ctx context.Context, conn *pgx.Conn, tenants []string, lo, hi, n, keyed int, start time.Time, step time.Duration, s SeedShape) error {
	// The fate of charge seq: the newest are in flight, the rest settled.
	// j counts from the newest (0).
	fate := fmt.Sprintf(`CASE
		WHEN {n} - seq < %[1]d THEN 'pending'
		WHEN {n} - seq < %[2]d THEN 'submitting'
		WHEN {n} - seq < %[3]d THEN 'unknown'
		WHEN {n} - seq < %[4]d THEN 'needs_review'
		WHEN abs(hashint8(seq)) %% 100 < %[5]d THEN 'failed'
		ELSE 'succeeded' END`,
		s.Pending, s.Pending+s.Submitting, s.Pending+s.Submitting+s.Unknown,
		s.Pending+s.Submitting+s.Unknown+s.NeedsReview, s.FailedPercent)
	steps := []string{
		`TRUNCATE seed_chunk`,
		`INSERT INTO seed_chunk (seq, tenant_id, id, created_at, fate)
		SELECT seq, ({tenants}::text[])[1 + seq % cardinality({tenants}::text[])], pg_temp.seed_id('ch', at), at, ` + fate + `
		FROM generate_series({lo}, {hi}) seq, LATERAL (SELECT {start}::timestamptz + seq * {step}::interval AS at) t`,
		`INSERT INTO charges (tenant_id, id, state, amount, currency, payment_method, description, metadata,
			provider, provider_key, created_at, updated_at)
		SELECT tenant_id, id, 'pending', 500 + seq % 20000, 'USD', 'pm_card_visa', 'Order ' || seq,
			jsonb_build_object('order_id', 'ord_' || seq), 'fakepsp', 'cf_' || id, created_at, created_at
		FROM seed_chunk ORDER BY seq`,
		`INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt, created_at)
		SELECT tenant_id, id, NULL, 'pending', 'api', 'accepted', 0, created_at FROM seed_chunk ORDER BY seq`,
		`INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, charge_id, status_code, response_body, created_at, expires_at)
		SELECT tenant_id, sha256(convert_to('key-' || id, 'UTF8')), sha256(convert_to('fp-' || id, 'UTF8')), id, 201,
			convert_to(jsonb_build_object('id', id, 'object', 'charge', 'amount', 500 + seq % 20000, 'currency', 'USD',
				'status', 'pending', 'payment_method', 'pm_card_visa', 'description', 'Order ' || seq,
				'metadata', jsonb_build_object('order_id', 'ord_' || seq), 'created', extract(epoch FROM created_at)::bigint,
				'amount_refunded', 0, 'provider_charge_id', NULL, 'failure_code', NULL)::text, 'UTF8'),
			created_at, created_at + {ttl}::interval
		FROM seed_chunk WHERE seq > {keyfloor} ORDER BY seq`,
		`INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags)
		SELECT jsonb_build_object('tenant_id', tenant_id, 'charge_id', id), 'charge.submit', 25, '{}', 1, 'default',
			created_at, 'available', '{}'
		FROM seed_chunk WHERE fate = 'pending'`,
		// pending -> submitting, the first attempt a moment after accept.
		`UPDATE charges c SET state = 'submitting', attempts = 1, first_attempt_at = s.created_at + interval '20 ms',
			last_attempt_at = CASE WHEN s.fate = 'submitting' THEN now() - interval '1 minute' ELSE s.created_at + interval '20 ms' END,
			updated_at = s.created_at + interval '20 ms'
		FROM seed_chunk s WHERE c.tenant_id = s.tenant_id AND c.id = s.id AND s.fate <> 'pending'`,
		`INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt, created_at)
		SELECT tenant_id, id, 'pending', 'submitting', 'worker', 'sending', 1, created_at + interval '20 ms'
		FROM seed_chunk WHERE fate <> 'pending' ORDER BY seq`,
		`UPDATE charges c SET state = CASE WHEN s.fate = 'needs_review' THEN 'unknown' ELSE s.fate END,
			provider_charge_id = CASE WHEN s.fate = 'succeeded' THEN 'pi_' || substr(s.id, 4) END,
			failure_code = CASE WHEN s.fate = 'failed' THEN 'card_declined' END,
			unknown_since = CASE WHEN s.fate IN ('unknown', 'needs_review') THEN s.created_at + interval '30 s' END,
			next_check_at = CASE WHEN s.fate IN ('unknown', 'needs_review') THEN now() + interval '1 hour' END,
			updated_at = s.created_at + interval '300 ms'
		FROM seed_chunk s WHERE c.tenant_id = s.tenant_id AND c.id = s.id AND s.fate IN ('succeeded', 'failed', 'unknown', 'needs_review')`,
		`INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt, created_at)
		SELECT tenant_id, id, 'submitting', CASE WHEN fate = 'needs_review' THEN 'unknown' ELSE fate END, 'worker',
			CASE fate WHEN 'succeeded' THEN 'provider_charged' WHEN 'failed' THEN 'provider_declined' ELSE 'timeout' END,
			1, created_at + interval '300 ms'
		FROM seed_chunk WHERE fate IN ('succeeded', 'failed', 'unknown', 'needs_review') ORDER BY seq`,
		`UPDATE charges c SET state = 'needs_review', review_reason = 'max_unknown_age', updated_at = now()
		FROM seed_chunk s WHERE c.tenant_id = s.tenant_id AND c.id = s.id AND s.fate = 'needs_review'`,
		`INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt, created_at)
		SELECT tenant_id, id, 'unknown', 'needs_review', 'reconciler', 'max_unknown_age', 1, now()
		FROM seed_chunk WHERE fate = 'needs_review' ORDER BY seq`,
	}
	refunds := []string{
		`TRUNCATE seed_chunk`,
		`INSERT INTO seed_chunk (seq, tenant_id, id, created_at, fate)
		SELECT seq, tenant_id, pg_temp.seed_id('re', at), at, 'succeeded'
		FROM seed_parent, LATERAL (SELECT {start}::timestamptz + seq * {step}::interval + interval '1 hour' AS at) t`,
	}
	refundSteps := []string{
		// A refund and its parent share their seq.
		`INSERT INTO charges (tenant_id, id, state, amount, currency, payment_method, description, metadata,
			provider, provider_key, created_at, updated_at, kind, parent_id, reason)
		SELECT s.tenant_id, s.id, 'pending', p.amount / 2 + 1, 'USD', NULL, NULL, '{}', 'fakepsp', 'cf_' || s.id,
			s.created_at, s.created_at, 'refund', p.id, 'requested_by_customer'
		FROM seed_chunk s JOIN seed_parent p ON p.seq = s.seq ORDER BY s.seq`,
		`INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt, created_at)
		SELECT tenant_id, id, NULL, 'pending', 'api', 'accepted', 0, created_at FROM seed_chunk ORDER BY seq`,
		`INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, charge_id, status_code, response_body, created_at, expires_at)
		SELECT tenant_id, sha256(convert_to('key-' || id, 'UTF8')), sha256(convert_to('fp-' || id, 'UTF8')), id, 201,
			convert_to(jsonb_build_object('id', id, 'object', 'refund', 'status', 'pending', 'reason', 'requested_by_customer',
				'created', extract(epoch FROM created_at)::bigint)::text, 'UTF8'),
			created_at, created_at + {ttl}::interval
		FROM seed_chunk WHERE seq > {keyfloor} ORDER BY seq`,
		`UPDATE charges c SET state = 'submitting', attempts = 1, first_attempt_at = s.created_at + interval '20 ms',
			last_attempt_at = s.created_at + interval '20 ms', updated_at = s.created_at + interval '20 ms'
		FROM seed_chunk s WHERE c.tenant_id = s.tenant_id AND c.id = s.id`,
		`UPDATE charges c SET state = 'succeeded', provider_charge_id = 're_' || substr(s.id, 4), updated_at = s.created_at + interval '300 ms'
		FROM seed_chunk s WHERE c.tenant_id = s.tenant_id AND c.id = s.id`,
		`INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt, created_at)
		SELECT tenant_id, id, m.from_state, m.to_state, 'worker', m.reason, 1, created_at + m.after
		FROM seed_chunk, (VALUES ('pending', 'submitting', 'sending', interval '20 ms'),
			('submitting', 'succeeded', 'provider_refunded', interval '300 ms')) m (from_state, to_state, reason, after)
		ORDER BY seq, m.after`,
	}
	tenantList := make([]string, len(tenants))
	for i, t := range tenants {
		tenantList[i] = `"` + t + `"`
	}
	// The statements' values are numbers, times and ids of our own making,
	// written as literals: a statement takes just the ones it uses.
	literals := strings.NewReplacer("{lo}", strconv.Itoa(lo), "{hi}", strconv.Itoa(hi), "{n}", strconv.Itoa(n), "{keyfloor}", strconv.Itoa(n-keyed),
		"{tenants}", "'{"+strings.Join(tenantList, ",")+"}'",
		"{start}", "'"+start.UTC().Format(time.RFC3339Nano)+"'",
		"{step}", fmt.Sprintf("'%d microseconds'", step.Microseconds()),
		"{ttl}", fmt.Sprintf("'%d seconds'", int64(s.KeyTTL.Seconds())))
	run := func(statements []string) error {
		for _, q := range statements {
			if _, err := conn.Exec(ctx, literals.Replace(q)); err != nil {
				return fmt.Errorf("%.60s…: %w", strings.Join(strings.Fields(q), " "), err)
			}
		}
		return nil
	}
	if err := run(steps); err != nil || s.RefundEvery <= 0 {
		return err
	}
	// The parents of this range's refunds, before the chunk is replaced.
	if err := run([]string{
		`TRUNCATE seed_parent`,
		`INSERT INTO seed_parent (seq, tenant_id, id, amount)
		SELECT seq, tenant_id, id, 500 + seq % 20000 FROM seed_chunk WHERE fate = 'succeeded' AND abs(hashint8(-seq)) % ` + strconv.Itoa(s.RefundEvery) + ` = 0`,
	}); err != nil {
		return err
	}
	if err := run(refunds); err != nil {
		return err
	}
	return run(refundSteps)
}
