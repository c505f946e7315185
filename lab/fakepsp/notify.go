package fakepsp

import (
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/chargeflow/chargeflow/internal/backoff"
	"github.com/chargeflow/chargeflow/psp"
)

// This file is the provider's notifications (docs/notifications.md): after
// a charge or refund is applied, a signed event is queued in memory and
// POSTed to the receiver by one sender, never on the way of the answer,
// retried with backoff until it is answered 2xx or Notifications.RetryFor
// has passed. The notification faults act as each is made.

// The defaults of Notifications.
const (
	// DefaultNotificationRetryFor is how long a notification is retried
	// after its first attempt.
	DefaultNotificationRetryFor = 10 * time.Minute

	// DefaultNotificationBackoff is the wait before the first retry,
	// doubled for each next one up to DefaultNotificationMaxBackoff.
	DefaultNotificationBackoff    = 500 * time.Millisecond
	DefaultNotificationMaxBackoff = time.Minute

	// DefaultNotificationTimeout bounds one POST.
	DefaultNotificationTimeout = 10 * time.Second
)

// maxReceiverAnswerBytes bounds how much of a receiver's answer is read
// (and thrown away) so the connection can be reused.
const maxReceiverAnswerBytes = 64 << 10

// ErrNotificationConfig is wrapped by New's refusal of Config.Notifications.
var ErrNotificationConfig = errors.New("fakepsp: invalid Config.Notifications")

// Notifications configures the notifications the provider sends. The zero
// value sends none.
type Notifications struct {
	// URL receives a POST for every charge applied, authorized or declined
	// and every refund, capture and cancel applied: an absolute http or
	// https URL. Empty sends nothing.
	URL string

	// Secret signs every notification with HMAC-SHA256: as Stripe signs
	// its events under the fake and Stripe protocols, as Adyen signs its
	// notification items under Adyen's, where it is the HMAC key in hex.
	// Required with URL; never logged.
	Secret string

	// RetryFor bounds how long a notification the receiver did not answer
	// 2xx is retried, from its first attempt. Defaults to
	// DefaultNotificationRetryFor.
	RetryFor time.Duration

	// Backoff is the wait before the first retry, doubled for each next
	// one up to MaxBackoff (internal/backoff, with its jitter). Default
	// DefaultNotificationBackoff and DefaultNotificationMaxBackoff.
	Backoff    time.Duration
	MaxBackoff time.Duration

	// Timeout bounds one POST. Defaults to DefaultNotificationTimeout.
	Timeout time.Duration
}

// NotificationStats is what the provider's notifications came to, as GET
// /_admin/notifications reports it, so that a scenario can count them.
type NotificationStats struct {
	// Enabled says the provider sends notifications (Notifications.URL).
	Enabled bool `json:"enabled"`

	// Made counts the notifications made: one per charge applied,
	// authorized or declined and per refund, capture and cancel applied,
	// whatever became of it.
	Made int `json:"made"`

	// Sent counts the genuine deliveries the receiver answered 2xx; a
	// duplicate's two copies count two.
	Sent int `json:"sent"`

	// Attempts counts the genuine POSTs, the failed ones included.
	Attempts int `json:"attempts"`

	// Failed counts the genuine deliveries given up on: still not answered
	// 2xx once RetryFor had passed.
	Failed int `json:"failed"`

	// Pending counts the deliveries still to make: queued, waiting to be
	// retried, delayed, held back by reorder, or being sent. A provider
	// that closes loses them: the queue is in memory.
	Pending int `json:"pending"`

	// Dropped, Forged, Duplicated, Reordered and Delayed count the
	// notifications each fault acted on. A forgery is sent once, never
	// retried, and is not counted in Sent or Attempts.
	Dropped    int `json:"dropped"`
	Forged     int `json:"forged"`
	Duplicated int `json:"duplicated"`
	Reordered  int `json:"reordered"`
	Delayed    int `json:"delayed"`
}

// event is a notification as a protocol words it.
type event struct {
	// typ is the protocol's event type, for logs.
	typ string

	// body is the event, exactly as sent and signed.
	body []byte
}

// eventWording is how a protocol words a notification of c, made at
// created with the event id: ok is false for a record no notification is
// made of. A protocol that signs inside the body (Adyen) signs what it
// signs with sign; the others sign the whole body in a header when it is
// sent. Forging one with another amount words the same event of an
// altered record.
type eventWording func(c *record, id string, created time.Time, sign func(data []byte) string) (e event, ok bool, err error)

// notificationScheme is how a protocol notifies: its words, where its
// signature goes, and what a receiver answers to take a notification.
type notificationScheme struct {
	word eventWording

	// header, when set, carries the signature of the whole body, Stripe's
	// scheme (sign), computed anew at each attempt. Empty: the wording
	// signs inside the body with signBody, once.
	header   string
	signBody func(secret string, data []byte) string

	// accepts says whether the receiver took a delivery by its answer.
	accepts func(status int, body []byte) bool
}

// accepted2xx is the fake protocol's and Stripe's acceptance: any 2xx.
func accepted2xx(status int, _ []byte) bool {
	return status >= 200 && status <= 299
}

// delivery is one notification to send: a genuine one, or a forgery.
type delivery struct {
	eventID   string
	eventType string

	body []byte

	// signedBody and secret are what the signature is computed over and
	// with: body and the provider's secret, but for a forgery.
	signedBody []byte
	secret     string
	forged     bool

	due      time.Time // when it is to be sent (real time)
	seq      uint64    // queue order among deliveries due at once
	attempts int       // failed attempts so far
	giveUpAt time.Time // set at the first attempt: that plus RetryFor

	// releaseAt, for a delivery held back by reorder, is when it is
	// queued even if no next notification came; zero waits for one.
	releaseAt time.Time
}

// notifier sends a Server's notifications.
type notifier struct {
	cfg    Notifications
	scheme notificationScheme
	logger *slog.Logger
	now    func() time.Time // the signature's and the event's time
	client *http.Client

	// forgeSecret signs the forgeries that use a wrong secret.
	forgeSecret string

	ctx    context.Context // canceled by close: a POST in flight ends
	cancel context.CancelFunc
	wake   chan struct{} // capacity 1: the queue changed
	done   chan struct{} // closed when the sender returns

	mu       sync.Mutex
	closed   bool
	queue    deliveryQueue
	held     []*delivery
	inFlight int
	seq      uint64
	forges   int
	stats    NotificationStats
}

// checkNotifications refuses a configuration that cannot send under
// protocol.
func checkNotifications(cfg Notifications, protocol string) error {
	if cfg.URL == "" {
		return nil
	}
	target, err := url.Parse(cfg.URL)
	switch {
	case err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "":
		return fmt.Errorf("%w: URL must be an absolute http or https URL", ErrNotificationConfig)
	case cfg.Secret == "":
		return fmt.Errorf("%w: a URL needs a Secret to sign with", ErrNotificationConfig)
	case cfg.RetryFor < 0 || cfg.Backoff < 0 || cfg.MaxBackoff < 0 || cfg.Timeout < 0:
		return fmt.Errorf("%w: durations must not be negative", ErrNotificationConfig)
	case protocol == ProtocolAdyen && !isHexKey(cfg.Secret):
		return fmt.Errorf("%w: the adyen protocol signs with an HMAC key in hex, as Adyen gives it; the Secret is not hex", ErrNotificationConfig)
	}
	return nil
}

// newNotifier starts the sender for cfg, whose URL is set, notifying in
// scheme's words and signatures.
func newNotifier(cfg Notifications, scheme notificationScheme, logger *slog.Logger, now func() time.Time) *notifier {
	cfg.RetryFor = cmp.Or(cfg.RetryFor, DefaultNotificationRetryFor)
	cfg.Backoff = cmp.Or(cfg.Backoff, DefaultNotificationBackoff)
	cfg.MaxBackoff = max(cmp.Or(cfg.MaxBackoff, DefaultNotificationMaxBackoff), cfg.Backoff)
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultNotificationTimeout)

	// A transport of its own, without a proxy, as psp.Client's.
	transport := &http.Transport{}
	if defaults, ok := http.DefaultTransport.(*http.Transport); ok {
		transport = defaults.Clone()
	}
	transport.Proxy = nil
	ctx, cancel := context.WithCancel(context.Background())
	n := &notifier{
		cfg:    cfg,
		scheme: scheme,
		logger: logger,
		now:    now,
		client: &http.Client{
			Transport: transport,
			Timeout:   cfg.Timeout,
			// A receiver that redirects did not take the notification:
			// the 3xx is a failed attempt, retried.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		forgeSecret: hex.EncodeToString([]byte(rand.Text())), // hex, as an Adyen key is
		ctx:         ctx,
		cancel:      cancel,
		wake:        make(chan struct{}, 1),
		done:        make(chan struct{}),
		stats:       NotificationStats{Enabled: true},
	}
	go n.run()
	return n
}

// notify makes the notification of c, which was just recorded, when the
// protocol notifies it, and queues it as the decision draw gives; it never
// waits for the receiver. draw is called only for a notification made, so
// records no notification is made of shift no fault's draws.
func (n *notifier) notify(c *record, draw func() decision) {
	id, created := "evt_"+rand.Text(), n.now().UTC()
	var signed []byte // what the genuine body's own signature covers (Adyen)
	genuine, ok, err := n.word(c, id, created, func(data []byte) string {
		signed = data
		return n.scheme.signBody(n.cfg.Secret, data)
	})
	if !ok {
		return
	}
	if err != nil {
		n.logger.Error("fakepsp: cannot word a notification", slog.String("id", c.ID), slog.Any("error", err))
		return
	}
	d := draw()
	forged := d.fault == FaultForge
	altersBody := forged && n.nextForgeAltersBody()
	var forgery event
	switch {
	case altersBody:
		// The same event of an altered record, under the genuine
		// signature: a header's over the genuine body, or the genuine
		// item's own.
		// The charge too: a cancel's event shows its charge, and no amount
		// of its own.
		tampered := &record{ledgerRecord: c.ledgerRecord, committed: c.committed, charge: c.charge}
		tampered.Amount *= 100
		if c.charge != nil {
			tampered.charge = &record{ledgerRecord: c.charge.ledgerRecord, committed: c.charge.committed}
			tampered.charge.Amount *= 100
		}
		forgery, _, err = n.word(tampered, id, created, func([]byte) string { return n.scheme.signBody(n.cfg.Secret, signed) })
	case forged && n.scheme.header == "":
		// The genuine body, its own signature made with a wrong key.
		forgery, _, err = n.word(c, id, created, func(data []byte) string { return n.scheme.signBody(n.forgeSecret, data) })
	}
	if err != nil {
		n.logger.Error("fakepsp: cannot word a forged notification", slog.String("id", c.ID), slog.Any("error", err))
		return
	}

	now := time.Now()
	first := &delivery{eventID: id, eventType: genuine.typ, body: genuine.body,
		signedBody: genuine.body, secret: n.cfg.Secret, due: now}

	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.stats.Made++
	switch d.fault {
	case FaultDrop:
		n.stats.Dropped++
		return
	case FaultReorder:
		n.stats.Reordered++
		if d.duration > 0 {
			first.releaseAt = now.Add(d.duration)
		}
		n.held = append(n.held, first)
		n.signal()
		return
	case FaultForge:
		n.stats.Forged++
		first.forged = true
		if forgery.body != nil {
			first.body = forgery.body // a header's signature stays the genuine body's
		} else {
			first.secret = n.forgeSecret
		}
	case FaultDelay:
		n.stats.Delayed++
		first.due = now.Add(d.duration)
	case FaultDuplicate:
		n.stats.Duplicated++
		second := *first
		n.pushLocked(first)
		first = &second
	}
	n.pushLocked(first)

	// What reorder held back goes right after this one.
	for _, h := range n.held {
		h.due, h.releaseAt = first.due, time.Time{}
		n.pushLocked(h)
	}
	n.held = nil
	n.signal()
}

// nextForgeAltersBody says whether the next forgery alters the body under
// the genuine signature (true) or signs with a wrong secret (false): they
// take turns, the wrong secret first.
func (n *notifier) nextForgeAltersBody() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.forges++
	return n.forges%2 == 0
}

// pushLocked queues d after everything queued before it that is due as
// soon. n.mu must be held.
func (n *notifier) pushLocked(d *delivery) {
	n.seq++
	d.seq = n.seq
	heap.Push(&n.queue, d)
}

// signal wakes the sender without blocking.
func (n *notifier) signal() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// run is the sender: it sends each delivery once it is due, one at a time,
// in the order they are due, until close.
func (n *notifier) run() {
	defer close(n.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d, wait := n.next(time.Now())
		if d != nil {
			n.send(d)
			continue
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-n.ctx.Done():
			return
		case <-n.wake:
		case <-timer.C:
		}
	}
}

// next takes the delivery to send now, or says how long until one is due
// (an hour when nothing is: the sender is woken when that changes). A
// delivery held back by reorder past its releaseAt is queued first.
func (n *notifier) next(now time.Time) (*delivery, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	wait := time.Hour
	held := n.held[:0]
	for _, h := range n.held {
		switch {
		case h.releaseAt.IsZero():
			held = append(held, h)
		case !now.Before(h.releaseAt):
			h.due, h.releaseAt = now, time.Time{}
			n.pushLocked(h)
		default:
			held = append(held, h)
			wait = min(wait, h.releaseAt.Sub(now))
		}
	}
	n.held = held
	if n.queue.Len() == 0 {
		return nil, wait
	}
	if top := n.queue[0]; now.Before(top.due) {
		return nil, min(wait, top.due.Sub(now))
	}
	n.inFlight++
	return heap.Pop(&n.queue).(*delivery), 0
}

// send makes one attempt at d and decides what becomes of it: sent, queued
// again after a backoff, or given up on. A forgery is sent once.
func (n *notifier) send(d *delivery) {
	start := time.Now()
	status, answer, err := n.post(d)
	delivered := err == nil && n.scheme.accepts(status, answer)

	n.mu.Lock()
	defer n.mu.Unlock()
	n.inFlight--
	attrs := []any{slog.String("event", d.eventID), slog.String("type", d.eventType),
		slog.Int("status", status), slog.Int("attempt", d.attempts+1)}
	if err != nil {
		attrs = append(attrs, slog.Any("error", err))
	}
	switch {
	case d.forged:
		n.logger.Info("fakepsp: forged notification sent", attrs...)
		return
	case n.closed:
		return
	}
	n.stats.Attempts++
	if delivered {
		n.stats.Sent++
		n.logger.Debug("fakepsp: notification sent", attrs...)
		return
	}

	if d.giveUpAt.IsZero() {
		d.giveUpAt = start.Add(n.cfg.RetryFor)
	}
	now := time.Now()
	if !now.Before(d.giveUpAt) {
		n.stats.Failed++
		n.logger.Warn("fakepsp: notification given up", attrs...)
		return
	}
	d.attempts++
	d.due = now.Add(backoff.Delay(d.attempts, n.cfg.Backoff, n.cfg.MaxBackoff))
	if d.due.After(d.giveUpAt) {
		d.due = d.giveUpAt
	}
	n.logger.Info("fakepsp: notification not taken, retrying", append(attrs, slog.Duration("in", d.due.Sub(now)))...)
	n.pushLocked(d)
}

// post sends d once, signed now when the protocol signs in a header, and
// returns the receiver's status and (the start of) its answer.
func (n *notifier) post(d *delivery) (int, []byte, error) {
	req, err := http.NewRequestWithContext(n.ctx, http.MethodPost, n.cfg.URL, bytes.NewReader(d.body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "chargeflow-fakepsp")
	if n.scheme.header != "" {
		req.Header.Set(n.scheme.header, sign(d.secret, n.now(), d.signedBody))
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxReceiverAnswerBytes))
	_ = resp.Body.Close()
	return resp.StatusCode, answer, nil
}

// word words c in the protocol's words.
func (n *notifier) word(c *record, id string, created time.Time, sign func(data []byte) string) (event, bool, error) {
	return n.scheme.word(c, id, created, sign)
}

// sign is the signature header of both protocols, Stripe's scheme:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + body)>".
func sign(secret string, at time.Time, body []byte) string {
	t := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(t))
	mac.Write([]byte("."))
	mac.Write(body)
	return "t=" + t + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// snapshot returns the counts so far.
func (n *notifier) snapshot() NotificationStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	stats := n.stats
	stats.Pending = n.queue.Len() + len(n.held) + n.inFlight
	return stats
}

// close stops the sender: a POST in flight is abandoned and what is queued
// is lost, as a crash would lose it.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.cancel()
	<-n.done
	n.client.CloseIdleConnections()
}

// deliveryQueue orders deliveries by when they are due, then by the order
// they were queued.
type deliveryQueue []*delivery

func (q deliveryQueue) Len() int { return len(q) }

func (q deliveryQueue) Less(i, j int) bool {
	if !q[i].due.Equal(q[j].due) {
		return q[i].due.Before(q[j].due)
	}
	return q[i].seq < q[j].seq
}

func (q deliveryQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }

func (q *deliveryQueue) Push(x any) { *q = append(*q, x.(*delivery)) }

func (q *deliveryQueue) Pop() any {
	old := *q
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return d
}

// fakeEvent words a notification in the fake protocol
// (psp.NotificationEnvelope): a charge applied, authorized or declined, a
// refund applied, a capture or a cancel applied (the charge as it left
// it, under the operation's key and reference); nothing for a saved
// answer, which applied nothing.
func fakeEvent(c *record, id string, created time.Time, _ func([]byte) string) (event, bool, error) {
	var typ string
	var data any
	switch {
	case c.isCharge() && c.Status == psp.StatusSucceeded:
		typ, data = psp.EventChargeSucceeded, psp.ChargeNotification{Charge: c.wire(), IdempotencyKey: c.IdempotencyKey}
	case c.isCharge() && c.Status == psp.StatusRequiresCapture:
		typ, data = psp.EventChargeAuthorized, psp.ChargeNotification{Charge: c.wire(), IdempotencyKey: c.IdempotencyKey}
	case c.isOperation():
		typ = psp.EventChargeCaptured
		if c.Kind == kindCancel {
			typ = psp.EventChargeCanceled
		}
		data = psp.OperationNotification{Charge: c.charge.wireAt(c.leftHeld()).Charge, IdempotencyKey: c.IdempotencyKey,
			OperationReference: c.Reference}
	case c.isCharge():
		typ, data = psp.EventChargeFailed, psp.ChargeNotification{Charge: c.wire(), IdempotencyKey: c.IdempotencyKey}
	case c.isRefund():
		typ, data = psp.EventRefundSucceeded, psp.RefundNotification{Refund: c.refundWire().Refund, IdempotencyKey: c.IdempotencyKey}
	default:
		return event{}, false, nil
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return event{}, true, err
	}
	body, err := json.Marshal(psp.NotificationEnvelope{ID: id, Type: typ, CreatedAt: created, Data: raw})
	return event{typ: typ, body: body}, true, err
}
