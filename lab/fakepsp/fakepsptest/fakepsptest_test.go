package fakepsptest_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
)

// Start serves a working provider for the length of one test, and nothing
// of it outlives the test.
func TestStart(t *testing.T) {
	t.Parallel()

	var started *fakepsptest.Provider
	t.Run("serves until the test ends", func(t *testing.T) {
		started = fakepsptest.Start(t, fakepsp.Config{})

		if _, err := os.Stat(started.LedgerPath); err != nil {
			t.Fatalf("the ledger file was not created: %v", err)
		}
		if err := fakepsp.SetFaults(t.Context(), started.URL, fakepsp.Schedule{Seed: 5}); err != nil {
			t.Fatal(err)
		}
		if got := started.Server.Faults().Seed; got != 5 {
			t.Fatalf("URL and Server are not the same provider: seed %d after setting 5", got)
		}
		resp, err := started.Client().Get(started.URL + "/_admin/ledger")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /_admin/ledger: status %d", resp.StatusCode)
		}
	})

	if _, err := http.Get(started.URL + "/_admin/ledger"); err == nil {
		t.Fatal("the HTTP server is still up after its test ended")
	}
	// A closed provider refuses charges with 503 shutting_down.
	req := httptest.NewRequest(http.MethodPost, "/v1/charges",
		strings.NewReader(`{"amount":100,"currency":"USD","payment_method":"`+fakepsp.PaymentMethodVisa+`","reference":"ch_late"}`))
	req.Header.Set("Idempotency-Key", "pk_late")
	rec := httptest.NewRecorder()
	started.Server.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "shutting_down") {
		t.Fatalf("the provider was not closed after its test ended: status %d, body %s", rec.Code, rec.Body)
	}

	t.Run("keeps a given ledger path", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "mine.jsonl")
		if got := fakepsptest.Start(t, fakepsp.Config{LedgerPath: path}).LedgerPath; got != path {
			t.Fatalf("LedgerPath is %q, want %q", got, path)
		}
	})
}

// Refunds reads what a test refunded back from the provider's ledger.
func TestProviderRefunds(t *testing.T) {
	t.Parallel()

	started := fakepsptest.Start(t, fakepsp.Config{})
	if refunds := started.Refunds(t); len(refunds) != 0 {
		t.Fatalf("a new provider has refunds: %v", refunds)
	}

	post := func(path, key, body string) string {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, started.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := started.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var answer struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: status %d, %v", path, resp.StatusCode, err)
		}
		return answer.ID
	}
	charge := post("/v1/charges", "pk_1", `{"amount":1000,"currency":"USD","payment_method":"`+fakepsp.PaymentMethodVisa+`","reference":"ch_1"}`)
	first := post("/v1/refunds", "rk_1", `{"charge":"`+charge+`","amount":300,"reference":"re_1"}`)
	second := post("/v1/refunds", "rk_2", `{"charge":"`+charge+`","amount":700,"reference":"re_2"}`)

	refunds := started.Refunds(t)
	if len(refunds) != 2 || refunds[0].ID != first || refunds[1].ID != second {
		t.Fatalf("refunds %+v, want %s then %s", refunds, first, second)
	}
	if refunds[0].Charge != charge || refunds[0].Amount != 300 || refunds[0].Reference != "re_1" || refunds[0].Currency != "USD" {
		t.Fatalf("first refund %+v", refunds[0])
	}
}
