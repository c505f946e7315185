// Package fakepsptest starts the fake payment provider for a test: on a
// loopback HTTP server, with a ledger in the test's temporary directory, shut
// down when the test ends. Tests in several packages need exactly that, and
// one starter keeps them from drifting apart, for instance in the order of
// shutdown.
//
// It imports only fakepsp and the standard library, so any test package can
// use it without pulling in test-only dependencies.
package fakepsptest

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"chargeflow/fakepsp"
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
