package api_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/apitest"
)

// Refunds that queue on their charge get their real answer. A transaction
// holds the charge's row for several lock timeouts while 200 one-unit
// refunds of the 100-unit charge arrive through two API processes, each
// with a pool of its own of four connections; meanwhile a read through
// each process is answered, so the queue did not take the pools. Once the
// row is free every refund gets 201 or 409 refund_exceeds_charge: none
// 503, none 409 request_in_progress, and exactly 100 are stored.
func TestRefundsQueueOnTheirCharge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const lockTimeout = 200 * time.Millisecond
	b := setup(t, func(o *setupOpts) { o.LockTimeout = fmt.Sprint(lockTimeout.Milliseconds()) })
	charge := b.succeededCharge(t, b.TenantA, 100)

	var urls []string
	for range 2 {
		cfg := b.Config
		cfg.DB = smallPool(t, b.DBURL, 4, lockTimeout)
		urls = append(urls, b.Serve(t, cfg))
	}

	holder, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `SELECT 1 FROM charges WHERE id = $1 FOR NO KEY UPDATE`, charge)
	require.NoError(t, err)

	answers := make([]response, 200)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			answers[i] = b.Refund(t, urls[i%2], b.TenantA, fmt.Sprintf("queued-refund-%04d", i), fmt.Sprintf(`{"charge": %q, "amount": 1}`, charge))
		})
	}
	// Both processes wait on the row, and keep doing so past several lock
	// timeouts.
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		return waiting >= 2
	}, 10*time.Second, 10*time.Millisecond)
	time.Sleep(5 * lockTimeout)
	for _, u := range urls {
		read := apitest.Request(t, u, http.MethodGet, "/v1/charges/"+charge, "", "Authorization", "Bearer "+b.TenantA.Key)
		require.Equal(t, http.StatusOK, read.Status, "a read is answered while refunds queue: %s", read.Body)
	}
	require.NoError(t, holder.Commit(ctx))
	wg.Wait()

	require.Equal(t, map[string]int{"201 ": 100, "409 refund_exceeds_charge": 100}, countAnswers(t, answers))
	var refunds, reserved int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM charges WHERE parent_id = $1),
		(SELECT amount_reserved FROM charges WHERE id = $1)`, charge).Scan(&refunds, &reserved))
	require.Equal(t, []int{100, 100}, []int{refunds, reserved})
}

// smallPool is another API process's own pool on the test's database.
func smallPool(t *testing.T, dbURL string, conns int32, lockTimeout time.Duration) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	cfg.MaxConns = conns
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = fmt.Sprint(lockTimeout.Milliseconds())
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// A 503 tells the truth about what was stored. Through a proxy that lets
// the accept's statement reach Postgres and then cuts the connection before
// its answer comes back, the charge is committed but the API cannot know:
// it answers 503 saying the outcome is unknown (not "nothing was stored"),
// and the retry with the same key gets the stored charge as a replay.
func TestUnknownCommitIsSaidToBeUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	proxy := startCuttingProxy(t, b.DBURL, []byte("INSERT INTO idempotency_keys"))
	cfg := b.Config
	cfg.DB = smallPool(t, proxy.url, 4, time.Second)
	through := b.Serve(t, cfg)
	headers := []string{"Authorization", "Bearer " + b.TenantA.Key, "Content-Type", "application/json"}

	// Warm the authentication cache, then arm the cut.
	require.Equal(t, http.StatusOK, apitest.Request(t, through, http.MethodGet, "/v1/charges", "", headers[:2]...).Status)
	proxy.armed.Store(true)
	resp := apitest.Request(t, through, http.MethodPost, "/v1/charges", apitest.ValidBody, append(headers, "Idempotency-Key", "cut-after-commit-0001")...)
	p := apitest.RequireProblem(t, resp, http.StatusServiceUnavailable, api.CodeDatabaseUnavailable)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Contains(t, p["detail"], "unknown")
	require.NotContains(t, p["detail"], "nothing was stored")
	require.Equal(t, int32(1), proxy.cuts.Load(), "the statement was cut once")

	require.Eventually(t, func() bool { return b.Stored(t).Charges == 1 }, 5*time.Second, 20*time.Millisecond,
		"the cut statement committed: the 503 could not have said nothing was stored")
	retried := b.Post(t, b.TenantA, "cut-after-commit-0001", apitest.ValidBody)
	require.Equal(t, http.StatusCreated, retried.Status, "body: %s", retried.Body)
	require.Equal(t, "true", retried.Header.Get("Idempotent-Replayed"))
	var jobs int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&jobs))
	require.Equal(t, 1, jobs)
}

// cuttingProxy forwards connections to Postgres. Armed, it cuts the first
// connection whose client sends marker, at the client's next write: pgx
// prepares a statement (its text, with the marker) in a round trip of its
// own, and the next write executes it. That write reaches Postgres, and
// the client's side is closed before any answer is passed back.
type cuttingProxy struct {
	url   string
	armed atomic.Bool
	cuts  atomic.Int32
}

func startCuttingProxy(t *testing.T, dbURL string, marker []byte) *cuttingProxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	target := u.Host
	u.Host = ln.Addr().String()
	p := &cuttingProxy{url: u.String()}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(client, target, marker)
		}
	}()
	return p
}

func (p *cuttingProxy) serve(client net.Conn, target string, marker []byte) {
	defer client.Close()
	server, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer server.Close()
	var cut atomic.Bool
	answered := make(chan struct{}) // Postgres finished what was cut
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if cut.Load() {
				if bytes.Contains(buf[:n], readyForQuery) {
					close(answered)
					return
				}
			} else if n > 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	primed := false
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if p.cuts.Load() > 0 && bytes.HasPrefix(buf[:n], cancelRequest) {
				return // the lost answer stays lost: pgx's cancel of the cut statement goes nowhere
			}
			if primed && p.armed.CompareAndSwap(true, false) {
				cut.Store(true)
				_, _ = server.Write(buf[:n])
				p.cuts.Add(1)
				_ = client.Close() // the answer never reaches the API
				select {
				case <-answered:
				case <-time.After(10 * time.Second):
				}
				return
			}
			primed = p.armed.Load() && bytes.Contains(buf[:n], marker)
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cancelRequest starts Postgres's CancelRequest packet (length 16, code
// 80877102), sent on a connection of its own.
var cancelRequest = []byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e}

// readyForQuery is Postgres's ReadyForQuery message, idle: the end of the
// answer to a statement that committed.
var readyForQuery = []byte{'Z', 0, 0, 0, 5, 'I'}
