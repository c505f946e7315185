// Command merchant is a small merchant server built on chargeflow's Go
// client (package chargeflow/client): it takes orders, charges each exactly
// once, and receives chargeflow's webhooks, verifying each before it logs
// the event's type and id. docs/client.md says how to run it against
// `make run`.
//
//	CHARGEFLOW_API_KEY=cfk_… MERCHANT_WEBHOOK_SECRET=whsec_… go run ./examples/merchant
//
//	POST /orders               {"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa"}
//	                           add "ship_later": true to authorize only, and take the money when it ships
//	POST /orders/{id}/charge   charge the order again, with its stored key (after an unknown outcome)
//	POST /orders/{id}/ship     capture an order authorized only: the money is taken
//	POST /orders/{id}/cancel   or release it: nothing is taken
//	GET  /orders/{id}          the order and its charge as chargeflow has it now
//	POST /webhooks/chargeflow  chargeflow's deliveries
//
// Orders live in memory here. A real merchant stores the order and its
// idempotency key in its database, in one transaction, before the first
// charge call; that is the point of making the key with the order.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/chargeflow/chargeflow/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "merchant:", err)
		os.Exit(1)
	}
}

// run is the program: flags, the environment, the server until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	flags := flag.NewFlagSet("merchant", flag.ContinueOnError)
	flags.SetOutput(stderr)
	addr := flags.String("addr", "127.0.0.1:8000", "address to serve on")
	apiURL := flags.String("api-url", cmp.Or(getenv("CHARGEFLOW_URL"), "http://127.0.0.1:8080"), "chargeflow's API (CHARGEFLOW_URL)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	// Secrets come from the environment only, never flags (ps shows flags).
	apiKey, secret := getenv("CHARGEFLOW_API_KEY"), getenv("MERCHANT_WEBHOOK_SECRET")
	if apiKey == "" {
		return errors.New("set CHARGEFLOW_API_KEY to a tenant's API key (chargeflow tenant create)")
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	if secret == "" {
		logger.Warn("MERCHANT_WEBHOOK_SECRET is not set: every webhook delivery will be refused")
	}
	c, err := client.New(*apiURL, apiKey)
	if err != nil {
		return err
	}

	server := &http.Server{
		Addr:              *addr,
		Handler:           newShop(c, secret, logger).routes(),
		ReadHeaderTimeout: 5 * time.Second,
	}
	errs := make(chan error, 1)
	go func() { errs <- server.ListenAndServe() }()
	logger.Info("merchant listening", "addr", *addr, "github.com/chargeflow/chargeflow", *apiURL)
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return server.Shutdown(shutdownCtx)
	}
}

// order is what the shop keeps of an order: the idempotency key of its
// charge is made with it, before chargeflow is called.
type order struct {
	ID            string `json:"id"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	// ShipLater authorizes the order only; ship captures it, cancel
	// releases it, each under a key made the first time it is asked for
	// and kept with the order, so that asking again after an unknown
	// outcome is the same request.
	ShipLater bool   `json:"ship_later,omitempty"`
	ChargeKey string `json:"-"`
	ChargeID  string `json:"charge_id,omitempty"`
	opKeys    map[string]string
}

type shop struct {
	chargeflow *client.Client
	secret     string
	logger     *slog.Logger

	mu     sync.Mutex
	orders map[string]*order
	// events holds the ids of the events acted on: a delivery may come
	// more than once, and each event is acted on once.
	events map[string]bool
}

func newShop(c *client.Client, secret string, logger *slog.Logger) *shop {
	return &shop{chargeflow: c, secret: secret, logger: logger, orders: map[string]*order{}, events: map[string]bool{}}
}

func (s *shop) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", s.createOrder)
	mux.HandleFunc("POST /orders/{id}/charge", s.chargeOrder)
	mux.HandleFunc("POST /orders/{id}/ship", s.shipOrder)
	mux.HandleFunc("POST /orders/{id}/cancel", s.cancelOrder)
	mux.HandleFunc("GET /orders/{id}", s.getOrder)
	mux.HandleFunc("POST /webhooks/chargeflow", s.receiveWebhook)
	return mux
}

// createOrder stores the order with its charge's idempotency key, then
// charges it.
func (s *shop) createOrder(w http.ResponseWriter, r *http.Request) {
	var o order
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&o); err != nil {
		http.Error(w, "a JSON order: amount, currency, payment_method", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	o.ID = "order-" + strconv.Itoa(len(s.orders)+1)
	o.ChargeKey = client.NewIdempotencyKey()
	s.orders[o.ID] = &o
	s.mu.Unlock()
	s.charge(w, r, &o)
}

// chargeOrder charges an order again with its stored key: after an unknown
// outcome, this returns the charge the first call made, or makes it.
func (s *shop) chargeOrder(w http.ResponseWriter, r *http.Request) {
	o, ok := s.order(r.PathValue("id"))
	if !ok {
		http.NotFound(w, r)
		return
	}
	s.charge(w, r, o)
}

func (s *shop) charge(w http.ResponseWriter, r *http.Request, o *order) {
	s.mu.Lock()
	params := client.ChargeParams{
		Amount: o.Amount, Currency: o.Currency, PaymentMethod: o.PaymentMethod,
		Metadata: map[string]string{"order": o.ID}, IdempotencyKey: o.ChargeKey, CaptureLater: o.ShipLater,
	}
	s.mu.Unlock()
	charge, err := s.chargeflow.CreateCharge(r.Context(), params)
	var refused *client.Error
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown):
		s.logger.Warn("charge outcome unknown; charge the order again later", "order", o.ID, "err", err.Error())
		writeJSON(w, http.StatusAccepted, map[string]string{"order": o.ID, "retry": "POST /orders/" + o.ID + "/charge"})
		return
	case errors.As(err, &refused):
		s.logger.Info("charge refused", "order", o.ID, "code", string(refused.Code), "field", refused.Field)
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"order": o.ID, "code": string(refused.Code), "detail": refused.Detail})
		return
	case err != nil:
		s.logger.Error("charge", "order", o.ID, "err", err.Error())
		http.Error(w, "charge failed", http.StatusBadGateway)
		return
	}
	s.mu.Lock()
	o.ChargeID = charge.ID
	s.mu.Unlock()
	s.logger.Info("charged", "order", o.ID, "charge", charge.ID, "status", string(charge.Status), "replayed", charge.Replayed)
	writeJSON(w, http.StatusCreated, map[string]any{"order": o, "charge": charge})
}

// shipOrder captures an order authorized only, all of it.
func (s *shop) shipOrder(w http.ResponseWriter, r *http.Request) {
	s.operate(w, r, "ship", func(ctx context.Context, chargeID, key string) (*client.Operation, error) {
		return s.chargeflow.CaptureCharge(ctx, chargeID, client.CaptureParams{IdempotencyKey: key})
	})
}

// cancelOrder releases an order authorized only.
func (s *shop) cancelOrder(w http.ResponseWriter, r *http.Request) {
	s.operate(w, r, "cancel", func(ctx context.Context, chargeID, key string) (*client.Operation, error) {
		return s.chargeflow.CancelCharge(ctx, chargeID, client.CancelParams{IdempotencyKey: key})
	})
}

// operate sends what ship or cancel asks of the order's charge, under the
// key kept with the order for it. chargeflow refuses, storing nothing, an
// order shipped or canceled already, or with the other on its way
// (charge_not_capturable, operation_in_progress): the shop passes that on.
func (s *shop) operate(w http.ResponseWriter, r *http.Request, what string,
	send func(ctx context.Context, chargeID, key string) (*client.Operation, error)) {
	o, ok := s.order(r.PathValue("id"))
	if !ok {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	chargeID, key := o.ChargeID, o.opKeys[what]
	if key == "" && chargeID != "" && o.ShipLater {
		key = client.NewIdempotencyKey()
		if o.opKeys == nil {
			o.opKeys = map[string]string{}
		}
		o.opKeys[what] = key
	}
	s.mu.Unlock()
	if key == "" {
		writeJSON(w, http.StatusConflict, map[string]string{"order": o.ID, "detail": "only an order authorized (ship_later) and charged can be shipped or canceled"})
		return
	}
	op, err := send(r.Context(), chargeID, key)
	var refused *client.Error
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown):
		s.logger.Warn(what+" outcome unknown; ask again later", "order", o.ID, "err", err.Error())
		writeJSON(w, http.StatusAccepted, map[string]string{"order": o.ID, "retry": "POST /orders/" + o.ID + "/" + what})
		return
	case errors.As(err, &refused):
		s.logger.Info(what+" refused", "order", o.ID, "code", string(refused.Code))
		writeJSON(w, http.StatusConflict, map[string]string{"order": o.ID, "code": string(refused.Code), "detail": refused.Detail})
		return
	case err != nil:
		s.logger.Error(what, "order", o.ID, "err", err.Error())
		http.Error(w, what+" failed", http.StatusBadGateway)
		return
	}
	s.logger.Info(what+" sent", "order", o.ID, "operation", op.ID, "status", string(op.Status), "replayed", op.Replayed)
	writeJSON(w, http.StatusCreated, map[string]any{"order": o.ID, what: op})
}

func (s *shop) getOrder(w http.ResponseWriter, r *http.Request) {
	o, ok := s.order(r.PathValue("id"))
	if !ok {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	snapshot := *o
	s.mu.Unlock()
	answer := map[string]any{"order": snapshot}
	if snapshot.ChargeID != "" {
		charge, err := s.chargeflow.GetCharge(r.Context(), snapshot.ChargeID)
		if err != nil {
			s.logger.Error("get charge", "order", o.ID, "err", err.Error())
			http.Error(w, "chargeflow did not answer", http.StatusBadGateway)
			return
		}
		answer["charge"] = charge
	}
	writeJSON(w, http.StatusOK, answer)
}

func (s *shop) order(id string) (*order, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[id]
	return o, ok
}

// receiveWebhook verifies a delivery, then logs its event's type and id,
// once per event. A delivery that does not verify is refused with 400 and
// not looked at further.
func (s *shop) receiveWebhook(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	event, err := client.ConstructEvent(s.secret, r.Header, body, client.DefaultWebhookTolerance)
	if err != nil {
		s.logger.Warn("webhook refused", "err", err.Error())
		http.Error(w, "invalid webhook", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	seen := s.events[event.ID]
	s.events[event.ID] = true
	s.mu.Unlock()
	if seen {
		s.logger.Info("webhook already handled", "event", event.ID, "type", event.Type)
	} else {
		s.logger.Info("webhook", "event", event.ID, "type", event.Type)
	}
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
