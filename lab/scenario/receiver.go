package scenario

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	chargeflow "github.com/chargeflow/chargeflow/client"
)

// Receiver is a merchant's webhook endpoint, served on loopback: it
// verifies every delivery as a merchant would, with chargeflow.VerifyWebhook
// and the endpoint's secret, and records what reached it. It can answer
// 500 to a share of the deliveries at random, and be down — every
// connection dropped — for a while. The scenarios and the webhooks test of
// cmd/chargeflow use this one receiver, and CheckWebhooks to judge what it
// got (docs/scenarios.md, "Webhooks").
type Receiver struct {
	// URL is where the endpoint is: http://127.0.0.1:port/hooks.
	URL string

	server *http.Server
	down   atomic.Bool

	mu       sync.Mutex
	secret   string
	failRate float64
	rnd      *rand.Rand
	// accepted is every event answered 2xx, by webhook-id, and how often.
	accepted map[string]receivedEvent
	stats    ReceiverStats
	// problems lists deliveries that did not verify or whose webhook-id
	// was not the event's id.
	problems []string
}

type receivedEvent struct {
	event chargeflow.Event
	times int
}

// ReceiverStats counts what reached the receiver.
type ReceiverStats struct {
	// Attempts is every request; Dropped those cut while down, Failed
	// those answered 500 on purpose, Forged those that did not verify,
	// WrongID those whose webhook-id was not the body's event id.
	Attempts, Dropped, Failed, Forged, WrongID int
	// Delivered is how many distinct events were answered 2xx;
	// Redelivered how many of them were answered 2xx more than once.
	Delivered, Redelivered int
	// Skewed is how many deliveries verified with a webhook-timestamp more
	// than a minute from the receiver's clock: signed by a worker whose
	// clock is off, within the tolerance.
	Skewed int
}

// NewReceiver serves a receiver on loopback until ctx ends or Close. It
// answers 500 to failRate of the deliveries, drawn from a source seeded
// with seed. It refuses everything until SetSecret.
func NewReceiver(ctx context.Context, seed uint64, failRate float64) (*Receiver, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{
		URL:      "http://" + listener.Addr().String() + "/hooks",
		failRate: failRate,
		rnd:      rand.New(rand.NewPCG(seed, seed^0x0b5e55ed)),
		accepted: map[string]receivedEvent{},
	}
	r.server = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() { _ = r.server.Serve(listener) }()
	context.AfterFunc(ctx, r.Close)
	return r, nil
}

// Close stops the receiver.
func (r *Receiver) Close() { _ = r.server.Close() }

// SetSecret sets the endpoint's secret, which the API showed once.
func (r *Receiver) SetSecret(secret string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secret = secret
}

// Down drops every connection until Up.
func (r *Receiver) Down() { r.down.Store(true) }

// Up ends Down.
func (r *Receiver) Up() { r.down.Store(false) }

// SetFailRate changes the share of deliveries answered 500.
func (r *Receiver) SetFailRate(p float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failRate = p
}

// ServeHTTP receives one delivery.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r.down.Load() {
		r.mu.Lock()
		r.stats.Attempts++
		r.stats.Dropped++
		r.mu.Unlock()
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Attempts++
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	id := req.Header.Get("webhook-id")
	if err := chargeflow.VerifyWebhook(r.secret, req.Header, body, 0); err != nil {
		r.stats.Forged++
		r.problems = append(r.problems, fmt.Sprintf("delivery %s does not verify with the endpoint's secret: %v", id, err))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if signed, err := strconv.ParseInt(req.Header.Get("webhook-timestamp"), 10, 64); err == nil &&
		time.Since(time.Unix(signed, 0)).Abs() > time.Minute {
		r.stats.Skewed++
	}
	var event chargeflow.Event
	if err := json.Unmarshal(body, &event); err != nil {
		r.problems = append(r.problems, fmt.Sprintf("delivery %s is not an event: %v", id, err))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if event.ID != id {
		r.stats.WrongID++
		r.problems = append(r.problems, fmt.Sprintf("delivery with webhook-id %s carries event %s", id, event.ID))
	}
	if r.rnd.Float64() < r.failRate {
		r.stats.Failed++
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	got := r.accepted[id]
	got.event, got.times = event, got.times+1
	r.accepted[id] = got
}

// Stats counts what reached the receiver so far.
func (r *Receiver) Stats() ReceiverStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	for _, got := range r.accepted {
		s.Delivered++
		if got.times > 1 {
			s.Redelivered++
		}
	}
	return s
}

// InvariantWebhooks: every charge or refund that reached succeeded, failed
// or needs_review had the event of that move delivered at least once,
// signed with the endpoint's secret; every delivery's webhook-id is its
// event's id, on every retry; nothing was delivered that is not the event
// of a move in the charge's audit trail.
const InvariantWebhooks = "webhooks_told"

// settlingStates are the states whose moves write an event.
var settlingStates = []string{"succeeded", "failed", "needs_review"}

// CheckWebhooks judges what reached r against the database: the audit
// trail (charge_audit) says which moves happened, the events table which
// events were written.
func CheckWebhooks(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, r *Receiver) ([]Violation, error) {
	type move struct{ object, state string }
	// Every settling move of the audit trail, and its object's kind.
	moves := map[move]int{}
	kinds := map[string]string{}
	rows, err := db.Query(ctx, `SELECT e.charge_id, c.kind, e.to_state, count(*) FROM charge_audit e
		JOIN charges c ON (c.tenant_id, c.id) = (e.tenant_id, e.charge_id)
		WHERE e.to_state = ANY ($1) GROUP BY 1, 2, 3`, settlingStates)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var m move
		var kind string
		var n int
		if err := rows.Scan(&m.object, &kind, &m.state, &n); err != nil {
			rows.Close()
			return nil, err
		}
		moves[m], kinds[m.object] = n, kind
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// Every event of a charge or refund written.
	written := map[string]move{}
	rows, err = db.Query(ctx, `SELECT id, object_id, split_part(type, '.', 2) FROM events WHERE charge_id IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		var m move
		if err := rows.Scan(&id, &m.object, &m.state); err != nil {
			rows.Close()
			return nil, err
		}
		written[id] = m
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	var out []Violation
	add := func(subject, format string, args ...any) {
		out = append(out, Violation{InvariantWebhooks, subject, fmt.Sprintf(format, args...)})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.problems {
		add("", "%s", p)
	}
	delivered := map[move]int{}
	for id, got := range r.accepted {
		var data struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		}
		if err := json.Unmarshal(got.event.Data, &data); err != nil {
			add(id, "delivered event's data is not an object: %v", err)
			continue
		}
		if got.event.Type == "webhook_endpoint.disabled" {
			add(id, "endpoint %s was disabled: a delivery failed every attempt", data.ID)
			continue
		}
		m := move{data.ID, data.Status}
		switch w, ok := written[id]; {
		case !ok:
			add(id, "delivered an event that was never written")
		case w != m:
			add(id, "delivered event says %s %s, the event written is of %s %s", m.object, m.state, w.object, w.state)
		case moves[m] == 0:
			add(id, "delivered event of %s moving to %s, a move its audit trail does not have", m.object, m.state)
		case got.event.Type != kinds[m.object]+"."+m.state:
			add(id, "delivered event of type %s for a %s moving to %s", got.event.Type, kinds[m.object], m.state)
		default:
			delivered[m]++
		}
	}
	for _, m := range slices.SortedFunc(maps.Keys(moves), func(a, b move) int { return cmp.Compare(a.object+a.state, b.object+b.state) }) {
		if delivered[m] < moves[m] {
			add(m.object, "moved to %s %d times, %d events of it delivered", m.state, moves[m], delivered[m])
		}
	}
	return out, nil
}
