package pg

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrCommitUnconfirmed is the answer to a commit that PostgreSQL reported
// done although its wait for the synchronous standby was cancelled: the
// transaction is committed on this server, and the standby may not have it,
// so a failover may lose it. Nothing may be told it was committed, and
// nothing may act on it, until a later commit's wait succeeds.
var ErrCommitUnconfirmed = errors.New("the commit's wait for the synchronous standby was cancelled: committed on this server, perhaps not on the standby")

// Confirmed runs fn, and fails with ErrCommitUnconfirmed (joined with fn's
// own error) if PostgreSQL answered any statement fn ran under its ctx with
// the warning that a wait for synchronous replication was cancelled. Such a
// statement succeeds at the protocol's level — the server says COMMIT — so
// without this a cancelled wait (a statement_timeout, pg_cancel_backend) is
// indistinguishable from a replicated commit. It works on connections set up
// by Observe.
func Confirmed(ctx context.Context, fn func(context.Context) error) error {
	w := &watch{}
	err := fn(context.WithValue(ctx, watchKey{}, w))
	if w.cancelled.Load() {
		return errors.Join(ErrCommitUnconfirmed, err)
	}
	return err
}

// Observe makes cfg's connections report cancelled waits for synchronous
// replication to Confirmed. A warning that arrives outside any Confirmed
// (River's own statements, a read) goes to unwatched, which may be nil.
// It replaces cfg.Tracer; chargeflow sets no other.
func Observe(cfg *pgx.ConnConfig, unwatched func(*pgconn.Notice)) {
	o := &observer{unwatched: unwatched}
	cfg.Tracer = o
	next := cfg.OnNotice
	cfg.OnNotice = func(c *pgconn.PgConn, n *pgconn.Notice) {
		if CancelledSyncWait(n) {
			o.cancelled(c, n)
		}
		if next != nil {
			next(c, n)
		}
	}
}

// CancelledSyncWait reports whether n is PostgreSQL's warning that a
// commit stopped waiting for the synchronous standby: by a cancel
// ("canceling wait for synchronous replication due to user request") or a
// termination, each with the detail that the transaction "has already
// committed locally". The texts are the server's English messages: a server
// whose lc_messages translates them is not recognised.
func CancelledSyncWait(n *pgconn.Notice) bool {
	sev := n.SeverityUnlocalized
	if sev == "" {
		sev = n.Severity
	}
	return sev == "WARNING" && (strings.Contains(n.Message, "synchronous replication") || strings.Contains(n.Detail, "committed locally"))
}

type watchKey struct{}

type watch struct{ cancelled atomic.Bool }

// observer knows which Confirmed each connection's current statement runs
// under: the notice handler is told only the connection, and runs on the
// goroutine that reads the statement's answer, between the trace's start
// and end.
type observer struct {
	unwatched func(*pgconn.Notice)
	running   sync.Map // *pgconn.PgConn → *watch
}

func (o *observer) cancelled(c *pgconn.PgConn, n *pgconn.Notice) {
	if w, ok := o.running.Load(c); ok {
		w.(*watch).cancelled.Store(true)
		return
	}
	if o.unwatched != nil {
		o.unwatched(n)
	}
}

func (o *observer) start(ctx context.Context, conn *pgx.Conn) context.Context {
	if w, ok := ctx.Value(watchKey{}).(*watch); ok {
		o.running.Store(conn.PgConn(), w)
	}
	return ctx
}

func (o *observer) end(ctx context.Context, conn *pgx.Conn) {
	if _, ok := ctx.Value(watchKey{}).(*watch); ok {
		o.running.Delete(conn.PgConn())
	}
}

func (o *observer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return o.start(ctx, conn)
}

func (o *observer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, _ pgx.TraceQueryEndData) {
	o.end(ctx, conn)
}

func (o *observer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return o.start(ctx, conn)
}

func (o *observer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (o *observer) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchEndData) {
	o.end(ctx, conn)
}
