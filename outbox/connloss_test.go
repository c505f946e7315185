package outbox_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/outbox"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/submit"
)

// A connection lost while a commit is in flight — what a worker sees when
// the primary dies and its standby takes over — is no answer: the commit
// may or may not have happened. These tests cut the worker's connection to
// the real database at the exact message, through a TCP proxy on loopback,
// and check that the worker never takes the error for a definitive answer.

// cutProxy relays TCP to the database and, once, cuts a connection the
// moment the client sends bytes containing marker: with forward, the bytes
// reach the server first (it executes them; the answer never comes back),
// without, they are dropped (the server sees the connection end). From then
// on it refuses every connection, as a dead primary does, until heal.
type cutProxy struct {
	ln      net.Listener
	target  string
	marker  []byte
	forward bool
	cut     atomic.Bool
	healed  atomic.Bool
	wg      sync.WaitGroup
	// held is the server side of a connection cut after forwarding,
	// closed at the end of the test.
	held chan net.Conn
}

func startCutProxy(t *testing.T, target, marker string, forward bool) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target, marker: []byte(marker), forward: forward, held: make(chan net.Conn, 1)}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		select {
		case conn := <-p.held:
			conn.Close()
		default:
		}
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.cut.Load() && !p.healed.Load() {
			// After the cut the server is gone, as a dead primary is: not
			// even a cancel request gets through, until heal.
			client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		c := &proxied{client: client, server: server, answered: make(chan struct{})}
		p.wg.Go(c.answers)
		p.wg.Go(func() { p.relay(c) })
	}
}

// proxied is one relayed connection. Once swallowing, the server's answer
// is read and dropped, and answered is closed at its ReadyForQuery: the
// server has executed (and, outside a transaction, committed) what it got.
type proxied struct {
	client, server net.Conn
	swallowing     atomic.Bool
	answered       chan struct{}
}

// readyForQuery is the message that ends every answer of the server ('Z',
// length 5); the transaction status follows.
var readyForQuery = []byte{'Z', 0, 0, 0, 5}

func (c *proxied) answers() {
	defer c.client.Close()
	buf := make([]byte, 64<<10)
	done := false
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			if c.swallowing.Load() {
				if !done && bytes.Contains(buf[:n], readyForQuery) {
					done = true
					close(c.answered)
				}
			} else if _, werr := c.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *cutProxy) relay(c *proxied) {
	defer c.client.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			if !p.cut.Load() && bytes.Contains(buf[:n], p.marker) && p.cut.CompareAndSwap(false, true) {
				if p.forward {
					// The server executes the bytes; its answer goes
					// nowhere, and once it has answered the client loses
					// its connection.
					c.swallowing.Store(true)
					_, _ = c.server.Write(buf[:n])
					select {
					case <-c.answered:
					case <-time.After(30 * time.Second):
					}
					p.held <- c.server
				} else {
					// The bytes never arrive; the server sees the
					// connection end and rolls back what was open.
					c.server.Close()
				}
				return
			}
			if _, werr := c.server.Write(buf[:n]); werr != nil {
				c.server.Close()
				return
			}
		}
		if err != nil {
			c.server.Close()
			return
		}
	}
}

// heal lets connections through again, as a promoted standby does.
func (p *cutProxy) heal() { p.healed.Store(true) }

func (p *cutProxy) port() uint16 { return uint16(p.ln.Addr().(*net.TCPAddr).Port) }

// connLossBundle is a database, a provider that counts the calls it gets,
// a pending charge and its job, and a River client on the database whose
// outbox worker reaches the database through a cutProxy: the job's
// bookkeeping is River's, every write of the worker crosses the proxy.
type connLossBundle struct {
	pool   *pgxpool.Pool
	proxy  *cutProxy
	calls  atomic.Int64
	charge intent.Charge
	jobID  int64
}

func setupConnLoss(t *testing.T, marker string, forward bool) (context.Context, *connLossBundle) {
	t.Helper()
	ctx := context.Background()
	b := &connLossBundle{pool: dbtest.Pool(t)}
	provider := fakepsptest.Start(t, fakepsp.Config{})
	counted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.calls.Add(1)
		provider.Server.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(counted.Close)

	cc := b.pool.Config().ConnConfig
	b.proxy = startCutProxy(t, net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), marker, forward)
	cfg := b.pool.Config()
	cfg.MaxConns = 1
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = "127.0.0.1", b.proxy.port(), nil
	through, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(through.Close)

	worker, err := outbox.NewWorker(outbox.Config{
		DB:                through,
		Provider:          psp.NewClient(psp.Config{BaseURL: counted.URL, Timeout: 2 * time.Second}),
		UnknownCheckAfter: time.Minute,
	})
	require.NoError(t, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers:           workers,
		MaxAttempts:       20,
		RetryPolicy:       outbox.RetryPolicy{Base: 20 * time.Millisecond, Cap: 100 * time.Millisecond},
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)

	tenant := dbtest.Tenant(t, b.pool, "connection loss")
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		b.charge = dbtest.PendingCharge(t, tx, dbtest.Charge{TenantID: tenant, Amount: 4200, Currency: "EUR", PaymentMethod: "pm_card_visa"})
		res, err := client.InsertTx(ctx, tx, submit.ChargeArgs{TenantID: b.charge.TenantID, ChargeID: b.charge.ID}, nil)
		if err != nil {
			return err
		}
		b.jobID = res.Job.ID
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	})
	return ctx, b
}

// waitCutAndFailed waits until the connection was cut and River recorded
// the run's error.
func (b *connLossBundle) waitCutAndFailed(ctx context.Context, t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var errs int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT coalesce(array_length(errors, 1), 0) FROM river_job WHERE id = $1`, b.jobID).Scan(&errs))
		if b.proxy.cut.Load() && errs > 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "the connection was never cut (cut %v, job errors %d)", b.proxy.cut.Load(), errs)
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *connLossBundle) state(ctx context.Context, t *testing.T) intent.State {
	t.Helper()
	c, err := intent.Get(ctx, b.pool, b.charge.TenantID, b.charge.ID)
	require.NoError(t, err)
	return c.State
}

// waitState waits until the charge is in state.
func (b *connLossBundle) waitState(ctx context.Context, t *testing.T, state intent.State) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for b.state(ctx, t) != state {
		require.True(t, time.Now().Before(deadline), "the charge never reached %s (it is %s)", state, b.state(ctx, t))
		time.Sleep(10 * time.Millisecond)
	}
}

// The connection dies with the move to submitting sent: the server commits
// it, the worker gets an error. No provider call may follow — neither from
// this run nor from River's retry once the database is back, which finds
// the charge submitting and leaves the outcome to a lookup.
func TestConnectionLostAtSubmittingCommitNeverCallsTheProvider(t *testing.T) {
	t.Parallel()
	// The move's parameters carry the new state: the first bytes naming it
	// are the move to submitting, and the server executes them.
	ctx, b := setupConnLoss(t, string(intent.StateSubmitting), true)
	b.waitCutAndFailed(ctx, t)
	require.Zero(t, b.calls.Load(), "no provider call after a failed submitting commit")
	require.Equal(t, intent.StateSubmitting, b.state(ctx, t), "the server committed the move the worker never heard back about")

	b.proxy.heal()
	b.waitState(ctx, t, intent.StateUnknown)
	require.Zero(t, b.calls.Load(), "the retry must not call the provider either")
	require.Equal(t, []string{"submit", "rerun_found_submitting"}, reasons(ctx, t, b.pool, b.charge.ID))
}

// The connection dies with the outcome's commit unsent: the provider
// charged, the save is lost, the charge stays submitting — for River's
// retry (or the reconciler) to move to unknown and look up, never to
// re-send.
func TestConnectionLostAtOutcomeCommitLeavesTheChargeSubmitting(t *testing.T) {
	t.Parallel()
	// The outcome is saved and the job completed in one transaction; its
	// COMMIT is what never reaches the server.
	ctx, b := setupConnLoss(t, "commit", false)
	b.waitCutAndFailed(ctx, t)
	require.EqualValues(t, 1, b.calls.Load(), "the provider was called once")
	require.Equal(t, intent.StateSubmitting, b.state(ctx, t), "the outcome was never saved")

	b.proxy.heal()
	b.waitState(ctx, t, intent.StateUnknown)
	require.EqualValues(t, 1, b.calls.Load(), "the retry must not call the provider again")
	require.Equal(t, []string{"submit", "rerun_found_submitting"}, reasons(ctx, t, b.pool, b.charge.ID))
}

// reasons lists the reasons of a charge's moves, oldest first, after its
// creation.
func reasons(ctx context.Context, t *testing.T, db *pgxpool.Pool, id string) []string {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT reason FROM charge_audit WHERE charge_id = $1 AND from_state IS NOT NULL ORDER BY id`, id)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}
