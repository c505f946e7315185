package fakepsp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/chargeflow/chargeflow/psp"
)

// ErrLedgerPathRequired is returned by New when Config.LedgerPath is empty.
var ErrLedgerPathRequired = errors.New("fakepsp: Config.LedgerPath is required")

// ErrUnknownProtocol is returned by New when Config.Protocol names no
// protocol the provider speaks.
var ErrUnknownProtocol = errors.New("fakepsp: unknown protocol")

// The wire protocols the provider speaks, one per Server.
const (
	// ProtocolFake is chargeflow's own protocol (docs/provider.md), the one
	// psp.Client speaks.
	ProtocolFake = "fake"

	// ProtocolStripe is the subset of Stripe's API that docs/provider.md
	// ("The Stripe protocol") lists: PaymentIntents created and confirmed in
	// one call (or authorized, then captured or canceled), retrieved,
	// searched and listed, and their refunds, created, retrieved and listed.
	ProtocolStripe = "stripe"

	// ProtocolAdyen is the part of Adyen's Checkout API v71 that
	// docs/provider.md ("The Adyen protocol") lists: a payment with a
	// stored card, and its refunds, decided at once and told by
	// notification.
	ProtocolAdyen = "adyen"
)

// Config configures a Server.
type Config struct {
	// LedgerPath is the ledger file: every processed charge, refund,
	// capture and cancel is appended to it, and it is read back on New, so
	// they and their keys survive a restart. Required.
	LedgerPath string

	// Protocol is the wire protocol served: ProtocolFake (the default when
	// empty), ProtocolStripe or ProtocolAdyen. All share the ledger, the
	// faults and the admin endpoints.
	Protocol string

	// Dedupe switches the provider's own idempotency key de-duplication.
	// Defaults to true (nil means true). Faults.Dedupe and POST
	// /_admin/faults can override it at run time.
	Dedupe *bool

	// Faults is the fault schedule in force at start. The zero value injects
	// no faults.
	Faults Schedule

	// Logger receives a few lines per fault and per charge, never a payment
	// method. Defaults to discarding everything.
	Logger *slog.Logger

	// Now tells the time for charge timestamps and for the ages that
	// key_expiry and lookup_lag compare with their durations, and the
	// time of notifications and their signatures. Delays, held
	// connections and notification retries always use real time. Defaults
	// to time.Now.
	Now func() time.Time

	// Notifications, when its URL is set, makes the provider send a signed
	// notification of every charge it applies, authorizes or declines and
	// every refund, capture and cancel it applies, in the protocol's words
	// (docs/notifications.md).
	Notifications Notifications

	// HoldWindow is how long an authorization (a charge to be captured
	// later) is held before the provider releases it itself: from then a
	// read says canceled and a capture is refused. Zero means
	// DefaultHoldWindow. Each authorization keeps the window it was made
	// under, across a restart with another.
	HoldWindow time.Duration

	// MultipleCaptures lets a charge captured later be captured again, in
	// parts, while its captures take no more than was authorized and its
	// hold has not expired, as Adyen's multiple partial captures do; a
	// cancel still releases only a hold nothing captured. Off (the
	// default), a capture settles the hold. A laboratory mode: the
	// scenarios' negative control needs a provider that can apply a
	// capture sent twice.
	MultipleCaptures bool
}

// Server is the fake payment provider. Serve its Handler over HTTP/1.1 (the
// connection-dropping faults take over the TCP connection) from an
// http.Server whose WriteTimeout, if any, is longer than the longest fault
// duration.
type Server struct {
	logger    *slog.Logger
	now       func() time.Time
	ledger    *ledger
	faults    *faultEngine
	notifier  *notifier // nil when no notifications are sent
	handler   http.Handler
	committed *commitBatch // already durable; shared by records read back on New
	// holdWindow is Config.HoldWindow, or DefaultHoldWindow;
	// multipleCaptures is Config.MultipleCaptures.
	holdWindow       time.Duration
	multipleCaptures bool

	closing    chan struct{}  // closed by Close: held connections and delays end
	background sync.WaitGroup // delayed applies

	mu      sync.Mutex
	closed  bool
	charges []*record // every processed charge, in ledger order
	refunds []*record // every refund that moved money, in ledger order
	// operations are every capture and cancel applied, in ledger order.
	operations []*record
	byKey      map[string]*record  // the latest record per idempotency key, charges' and refunds' alike
	byID       map[string]*record  // every processed charge and refund by its id
	inFlight   map[string]struct{} // keys executing or awaiting a delayed apply (with dedupe on)

	closeOnce sync.Once
	closeErr  error
}

// New opens the ledger at cfg.LedgerPath, replays it and returns a Server
// ready to serve.
func New(cfg Config) (*Server, error) {
	if cfg.LedgerPath == "" {
		return nil, ErrLedgerPathRequired
	}
	if err := cfg.Faults.Validate(); err != nil {
		return nil, fmt.Errorf("fakepsp: Config.Faults: %w", err)
	}
	protocol := cmp.Or(cfg.Protocol, ProtocolFake)
	if protocol != ProtocolFake && protocol != ProtocolStripe && protocol != ProtocolAdyen {
		return nil, fmt.Errorf("%w %q: want %q, %q or %q", ErrUnknownProtocol, cfg.Protocol, ProtocolFake, ProtocolStripe, ProtocolAdyen)
	}
	if err := checkNotifications(cfg.Notifications, protocol); err != nil {
		return nil, err
	}
	if cfg.HoldWindow < 0 {
		return nil, fmt.Errorf("fakepsp: Config.HoldWindow is %v, want a positive duration (or zero: %v)", cfg.HoldWindow, DefaultHoldWindow)
	}

	logger := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	dedupe := true
	if cfg.Dedupe != nil {
		dedupe = *cfg.Dedupe
	}

	ledger, records, err := openLedger(cfg.LedgerPath, logger)
	if err != nil {
		return nil, err
	}

	committed := newCommitBatch()
	close(committed.done)
	s := &Server{
		logger:           logger,
		now:              now,
		ledger:           ledger,
		faults:           newFaultEngine(cfg.Faults, dedupe),
		committed:        committed,
		holdWindow:       cmp.Or(cfg.HoldWindow, DefaultHoldWindow),
		multipleCaptures: cfg.MultipleCaptures,
		closing:          make(chan struct{}),
		charges:          make([]*record, 0, len(records)),
		byKey:            make(map[string]*record, len(records)),
		byID:             make(map[string]*record, len(records)),
		inFlight:         make(map[string]struct{}),
	}
	for _, rec := range records {
		c := &record{ledgerRecord: rec, committed: committed}
		if err := s.linkLocked(c); err != nil {
			_ = ledger.file.Close()
			return nil, fmt.Errorf("fakepsp: read ledger %s: %w: %w", cfg.LedgerPath, ErrCorruptLedger, err)
		}
		s.addLocked(c)
	}
	s.handler = s.routes(protocol)
	ledger.start()
	notifying := cfg.Notifications.URL != ""
	if notifying {
		s.notifier = newNotifier(cfg.Notifications, notificationSchemeOf(protocol), logger, now)
	}

	logger.Info("fakepsp: ready", slog.String("protocol", protocol), slog.String("ledger", cfg.LedgerPath),
		slog.Int("charges", len(s.charges)), slog.Int("refunds", len(s.refunds)), slog.Int("operations", len(s.operations)), slog.Bool("dedupe", dedupe), slog.Duration("hold_window", s.holdWindow), slog.Int("fault_rules", len(cfg.Faults.Rules)),
		slog.Bool("notifications", notifying))
	return s, nil
}

// linkLocked points a refund, a capture or a cancel read back from the
// ledger at its charge, which an earlier line holds: each is appended only
// after its charge. One of a charge the file does not hold, or a second
// capture or cancel of one hold (but a capture in parts, with
// MultipleCaptures), is a corrupt ledger. s.mu must be held,
// or the server not yet shared.
func (s *Server) linkLocked(c *record) error {
	if !c.isRefund() && !c.isOperation() {
		return nil
	}
	if c.charge = s.findLocked(kindCharge, c.Charge); c.charge == nil {
		return fmt.Errorf("%s %s of charge %s, which no earlier line holds", c.Kind, c.ID, c.Charge)
	}
	if c.isOperation() && (c.charge.Status != psp.StatusRequiresCapture || c.charge.settlement.Load() != nil && !s.capturesAgain(c)) {
		return fmt.Errorf("%s %s of charge %s, which was not held", c.Kind, c.ID, c.Charge)
	}
	return nil
}

// notificationSchemeOf is how protocol notifies.
func notificationSchemeOf(protocol string) notificationScheme {
	switch protocol {
	case ProtocolStripe:
		return notificationScheme{word: stripeNotification, header: StripeSignatureHeader, accepts: accepted2xx}
	case ProtocolAdyen:
		return notificationScheme{word: adyenNotification, signBody: adyenHMAC, accepts: adyenAccepted}
	default:
		return notificationScheme{word: fakeEvent, header: psp.NotificationSignatureHeader, accepts: accepted2xx}
	}
}

// routes is the whole HTTP surface on one screen: the protocol's routes,
// then the admin endpoints every protocol shares.
func (s *Server) routes(protocol string) http.Handler {
	mux := http.NewServeMux()
	switch protocol {
	case ProtocolAdyen:
		mux.Handle("POST /v71/payments", s.adyen(s.handleAdyenPayment))
		mux.Handle("POST /v71/payments/{paymentPspReference}/refunds", s.adyen(s.handleAdyenRefund))
		mux.Handle("POST /v71/payments/{paymentPspReference}/captures", s.adyen(s.handleAdyenCapture))
		mux.Handle("POST /v71/payments/{paymentPspReference}/cancels", s.adyen(s.handleAdyenCancel))
		mux.Handle("/v71/", s.adyen(handleAdyenNotFound))
	case ProtocolStripe:
		mux.Handle("POST /v1/payment_intents", s.stripe(s.handleStripeCreate))
		mux.Handle("GET /v1/payment_intents/search", s.stripe(s.handleStripeSearch))
		mux.Handle("GET /v1/payment_intents/{id}", s.stripe(s.handleStripeRetrieve))
		mux.Handle("POST /v1/payment_intents/{id}/capture", s.stripe(s.handleStripeCapture))
		mux.Handle("POST /v1/payment_intents/{id}/cancel", s.stripe(s.handleStripeCancel))
		mux.Handle("GET /v1/payment_intents", s.stripe(s.handleStripeList))
		mux.Handle("POST /v1/refunds", s.stripe(s.handleStripeRefund))
		mux.Handle("GET /v1/refunds/{id}", s.stripe(s.handleStripeRefundRetrieve))
		mux.Handle("GET /v1/refunds", s.stripe(s.handleStripeRefundList))
		mux.Handle("/v1/", s.stripe(handleStripeNotFound))
	default:
		mux.HandleFunc("POST /v1/charges", s.handleCharge)
		mux.HandleFunc("GET /v1/charges/by-key/{key}", s.handleLookup)
		mux.HandleFunc("GET /v1/charges/{id}", s.handleChargeByID)
		mux.HandleFunc("POST /v1/charges/{id}/capture", s.handleCapture)
		mux.HandleFunc("POST /v1/charges/{id}/cancel", s.handleCancel)
		mux.HandleFunc("POST /v1/refunds", s.handleRefund)
		mux.HandleFunc("GET /v1/refunds/by-key/{key}", s.handleRefundLookup)
	}
	mux.HandleFunc("GET /_admin/ledger", s.handleLedger)
	mux.HandleFunc("GET /_admin/audit", s.handleAudit)
	mux.HandleFunc("GET /_admin/faults", s.handleGetFaults)
	mux.HandleFunc("POST /_admin/faults", s.handleSetFaults)
	mux.HandleFunc("GET /_admin/notifications", s.handleNotifications)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "route_not_found", "no route for "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// Handler returns the provider's HTTP handler.
func (s *Server) Handler() http.Handler {
	return s.handler
}

// Close stops the provider: held connections are released, delayed applies
// that have not happened yet are dropped (as a crash would drop them), so
// are the notifications not yet sent, pending ledger writes are flushed and
// the ledger file is closed. Charges
// that arrive afterwards get 503 shutting_down. Close is safe to call more
// than once; it does not close the HTTP server serving Handler.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()

		close(s.closing)
		s.background.Wait()
		if s.notifier != nil {
			s.notifier.close()
		}
		s.closeErr = s.ledger.close()
		s.logger.Info("fakepsp: closed")
	})
	return s.closeErr
}

// wait blocks for d or until the server closes. It deliberately ignores the
// client: a provider keeps working on a request its client gave up on.
func (s *Server) wait(d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-s.closing:
	}
}

// hold keeps a connection open for d, or until the client hangs up or the
// server closes.
func (s *Server) hold(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	case <-s.closing:
	}
}

// dropConnection closes the client's connection without an answer. With
// reset it sets SO_LINGER to 0 first, so the client gets a TCP RST instead
// of an orderly close.
func (s *Server) dropConnection(w http.ResponseWriter, reset bool) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// HTTP/2 cannot hand a connection over. A 502 keeps the outcome
		// just as unknown to the client.
		s.logger.Warn("fakepsp: cannot drop the connection, answering 502 instead", slog.Any("error", err))
		writeError(w, http.StatusBadGateway, "connection_drop_unsupported", "this server cannot drop connections; serve it over HTTP/1.1")
		return
	}
	if tcp, ok := conn.(*net.TCPConn); ok && reset {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// apiErrorBody is the provider's error format.
type apiErrorBody struct {
	Error apiErrorDetail `json:"error"`
}

type apiErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, apiErrorBody{Error: apiErrorDetail{Code: code, Message: message}})
}

func writeParamError(w http.ResponseWriter, param, message string) {
	writeJSON(w, http.StatusBadRequest, apiErrorBody{Error: apiErrorDetail{Code: "parameter_invalid", Message: message, Param: param}})
}

// writeJSON writes v as the response. A client that hung up is not an error
// worth reporting.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"code":"internal_error","message":"cannot encode the response"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
