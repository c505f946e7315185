// Package fakepsptest starts the fake payment provider for a test: on a
// loopback HTTP server, with a ledger in the test's temporary directory, shut
// down when the test ends. Tests in several packages need exactly that, and
// one starter keeps them from drifting apart, for instance in the order of
// shutdown. A Receiver stands in for whoever receives the provider's
// notifications.
//
// It imports only fakepsp and the standard library, so any test package can
// use it without pulling in test-only dependencies.
package fakepsptest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// Provider is a fake provider serving one test.
type Provider struct {
	// URL is the base URL of the provider's HTTP server, without a trailing
	// slash: what psp.Config.BaseURL, fakepsp.FetchLedger and
	// fakepsp.SetFaults take.
	URL string

	// Server is the provider itself, for tests that inspect its ledger and
	// faults in process, or close it early to see what a client gets then.
	Server *fakepsp.Server

	// LedgerPath is the ledger file in use, so that a test can start a second
	// provider on it, as after a restart.
	LedgerPath string

	http *httptest.Server
}

// Start starts a provider for cfg on a loopback HTTP server. An empty
// cfg.LedgerPath gets a fresh file in t.TempDir(); an unset cfg.Logger stays
// unset, which fakepsp.New takes as discarding everything, so tests are quiet
// unless they ask for logs. When the test ends the provider is closed first,
// releasing the connections its faults hold, and then the HTTP server, which
// would otherwise wait for those connections; an error from closing the
// provider (its ledger failed to flush) fails the test.
func Start(t testing.TB, cfg fakepsp.Config) *Provider {
	t.Helper()

	if cfg.LedgerPath == "" {
		cfg.LedgerPath = filepath.Join(t.TempDir(), "ledger.jsonl")
	}
	provider, err := fakepsp.New(cfg)
	if err != nil {
		t.Fatalf("fakepsptest: start the fake provider: %v", err)
	}

	server := httptest.NewServer(provider.Handler())
	// Cleanups run last-registered first.
	t.Cleanup(server.Close)
	t.Cleanup(func() {
		if err := provider.Close(); err != nil {
			t.Errorf("fakepsptest: close the fake provider: %v", err)
		}
	})

	return &Provider{URL: server.URL, Server: provider, LedgerPath: cfg.LedgerPath, http: server}
}

// Client returns an HTTP client for raw requests to URL. Its idle
// connections are closed with the server, so they do not outlive the test.
func (p *Provider) Client() *http.Client {
	return p.http.Client()
}

// Refunds returns the refunds in the provider's ledger, read through GET
// /_admin/ledger as any client reads them (fakepsp.FetchRefunds): grouped
// by charge in the order the charges were applied, each charge's in the
// order they were. A failed read fails the test.
func (p *Provider) Refunds(t testing.TB) []fakepsp.RefundEntry {
	t.Helper()

	refunds, err := fakepsp.FetchRefunds(t.Context(), p.URL)
	if err != nil {
		t.Fatalf("fakepsptest: read the refunds: %v", err)
	}
	return refunds
}

// AdyenAcknowledgement is the body with which a receiver takes an Adyen
// notification.
const AdyenAcknowledgement = "[accepted]"

// Delivery is one notification a Receiver got: the request's headers and
// body, exactly as sent, and the status the receiver answered.
type Delivery struct {
	Header http.Header
	Body   []byte
	Status int
}

// Receiver stands in for whoever receives the provider's notifications
// (fakepsp.Notifications.URL): a loopback HTTP server that keeps every
// delivery, in the order they arrived, and answers each with the status
// its answer function gives. A 2xx answer's body is "[accepted]", Adyen's
// acknowledgement, without which the Adyen protocol retries; the other
// protocols read the status alone.
type Receiver struct {
	// URL is the receiver's address, for fakepsp.Notifications.URL.
	URL string

	answer  func(n int, d Delivery) int
	arrived chan Delivery

	mu         sync.Mutex
	count      int
	deliveries []Delivery
}

// StartReceiver starts a Receiver, closed when the test ends. answer gives
// the status of the n-th delivery (1-based); nil answers 200 to all.
func StartReceiver(t testing.TB, answer func(n int, d Delivery) int) *Receiver {
	t.Helper()

	if answer == nil {
		answer = func(int, Delivery) int { return http.StatusOK }
	}
	r := &Receiver{answer: answer, arrived: make(chan Delivery, 1<<12)}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		d := Delivery{Header: req.Header.Clone(), Body: body}
		r.mu.Lock()
		r.count++
		n := r.count
		r.mu.Unlock()
		d.Status = r.answer(n, d)
		r.mu.Lock()
		r.deliveries = append(r.deliveries, d)
		r.mu.Unlock()
		w.WriteHeader(d.Status)
		if d.Status >= 200 && d.Status <= 299 {
			_, _ = io.WriteString(w, AdyenAcknowledgement)
		}
		r.arrived <- d
	}))
	t.Cleanup(server.Close)
	r.URL = server.URL
	return r
}

// Next returns the next delivery, in the order they arrived, waiting at
// most within; none by then fails the test.
func (r *Receiver) Next(t testing.TB, within time.Duration) Delivery {
	t.Helper()

	select {
	case d := <-r.arrived:
		return d
	case <-time.After(within):
		t.Fatalf("fakepsptest: no notification arrived within %s", within)
		return Delivery{}
	}
}

// Quiet requires that no delivery arrives for d.
func (r *Receiver) Quiet(t testing.TB, d time.Duration) {
	t.Helper()

	select {
	case got := <-r.arrived:
		t.Fatalf("fakepsptest: a notification arrived, none was expected: %s", got.Body)
	case <-time.After(d):
	}
}

// Deliveries returns every delivery so far, in the order they arrived.
func (r *Receiver) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.deliveries...)
}
