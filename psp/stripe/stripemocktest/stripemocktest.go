// Package stripemocktest runs stripe-mock, Stripe's server that validates
// every request against Stripe's OpenAPI description, for tests: the
// version scripts/ensure-stripe-mock pins (docs/provider.md, "Stripe's mock
// in the tests"), on a loopback port, stopped when the test ends.
//
// A test that needs it fails, never skips, when it cannot be had: the
// binary is installed by running the script, which builds it with the Go
// toolchain when missing.
package stripemocktest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// installTimeout bounds the script: a first install builds stripe-mock.
const installTimeout = 5 * time.Minute

// startTimeout bounds how long stripe-mock may take to say where it
// listens: it reads Stripe's whole description first, seconds on an idle
// machine and many more on one running every package's tests at once.
const startTimeout = 2 * time.Minute

// Binary returns the path of the pinned stripe-mock, running
// scripts/ensure-stripe-mock (which installs it when missing) once per test
// binary. It fails t when the script does.
func Binary(t testing.TB) string {
	t.Helper()
	binary.once.Do(func() { binary.path, binary.err = ensure() })
	if binary.err != nil {
		t.Fatalf("stripe-mock is not available: %v\n"+
			"scripts/ensure-stripe-mock installs the pinned version with the Go toolchain (it needs the Go module proxy); "+
			"CHARGEFLOW_STRIPE_MOCK may name a binary instead", binary.err)
	}
	return binary.path
}

var binary struct {
	once sync.Once
	path string
	err  error
}

// ensure runs the script and returns the path it prints.
func ensure() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the repository")
	}
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "ensure-stripe-mock")
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w\n%s", script, err, stderr.String())
	}
	path := strings.TrimSpace(string(out))
	if path == "" {
		return "", fmt.Errorf("%s printed no path\n%s", script, stderr.String())
	}
	return path, nil
}

// Start runs stripe-mock on a loopback port for the rest of t and returns
// its base URL. Its HTTPS listener is on a loopback port too (stripe-mock
// otherwise takes a fixed port on every interface). It is killed when t
// ends, and, on Linux, when the test process dies first.
func Start(t testing.TB) string {
	t.Helper()
	path := Binary(t)

	cmd := exec.Command(path, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	dieWithParent(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start stripe-mock: %v", err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	// stripe-mock prints "Listening for HTTP at address: 127.0.0.1:NNNN".
	addr := make(chan string, 1)
	var output strings.Builder
	var mu sync.Mutex
	go func() {
		defer close(exited)
		scanner := bufio.NewScanner(stdout)
		const prefix = "Listening for HTTP at address: "
		for scanner.Scan() {
			line := scanner.Text()
			mu.Lock()
			output.WriteString(line + "\n")
			mu.Unlock()
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				select {
				case addr <- strings.TrimSpace(rest):
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
	}()

	select {
	case a := <-addr:
		return "http://" + a
	case <-exited:
	case <-time.After(startTimeout):
	}
	mu.Lock()
	defer mu.Unlock()
	t.Fatalf("stripe-mock (%s) did not say where it listens; its output:\n%s", path, output.String())
	return ""
}

// Request is one request to Stripe's API: one the adapter sends, or one
// that differs from it by a parameter Stripe's description does not allow.
type Request struct {
	Name         string
	Method, Path string
	Params       url.Values // the form of a POST, the query of a GET
	Valid        bool       // whether Stripe's description allows it
}

// IDs are the objects the requests name.
type IDs struct {
	// Intent is a PaymentIntent, Refund one of its refunds, PaymentMethod
	// the payment method a charge is made with.
	Intent, Refund, PaymentMethod string

	// ToCapture and ToCancel are PaymentIntents authorized to be captured
	// later and still held, which the valid capture and the valid cancel
	// settle; Held is one more that every refused capture and cancel
	// names, which a server that refuses them before anything executes
	// leaves held. Three, so that a server that keeps state (the fake)
	// refuses each variant for its form and never for the intent's state.
	ToCapture, ToCancel, Held string
}

// Requests are the adapter's request shapes, and variants of them that
// stripe-mock refuses: a required parameter missing, one Stripe does not
// know, a value of the wrong type or outside its enum, naming ids.
func Requests(ids IDs) []Request {
	intent, refund := ids.Intent, ids.Refund
	charge := url.Values{
		"amount": {"1000"}, "currency": {"usd"}, "payment_method": {ids.PaymentMethod}, "confirm": {"true"},
		"automatic_payment_methods[enabled]": {"true"}, "automatic_payment_methods[allow_redirects]": {"never"},
		"metadata[chargeflow_charge]": {"ch_1"}, "metadata[chargeflow_tenant]": {"tn_1"},
	}
	later := url.Values{"capture_method": {"manual"}}
	for name, values := range charge {
		later[name] = values
	}
	capture := url.Values{"amount_to_capture": {"500"}}
	capturePath := func(id, action string) string { return "/v1/payment_intents/" + id + "/" + action }
	refunds := url.Values{"payment_intent": {intent}, "amount": {"100"}, "reason": {"requested_by_customer"},
		"metadata[chargeflow_refund]": {"re_1"}, "metadata[chargeflow_tenant]": {"tn_1"}}
	search := url.Values{"query": {"metadata['chargeflow_charge']:'ch_1'"}, "limit": {"10"}}
	list := url.Values{"created[gte]": {"1700000000"}, "created[lte]": {"1700000100"}, "limit": {"100"}}
	refundList := url.Values{"payment_intent": {intent}, "limit": {"100"}}
	edit := func(v url.Values, change func(url.Values)) url.Values {
		c := url.Values{}
		for k, vs := range v {
			c[k] = append([]string(nil), vs...)
		}
		change(c)
		return c
	}
	set := func(v url.Values, name, value string) url.Values {
		return edit(v, func(c url.Values) { c.Set(name, value) })
	}
	del := func(v url.Values, name string) url.Values {
		return edit(v, func(c url.Values) { c.Del(name) })
	}
	const post, get = http.MethodPost, http.MethodGet
	return []Request{
		{"a charge", post, "/v1/payment_intents", charge, true},
		{"a charge without amount", post, "/v1/payment_intents", del(charge, "amount"), false},
		{"a charge without currency", post, "/v1/payment_intents", del(charge, "currency"), false},
		{"a charge whose amount is not an integer", post, "/v1/payment_intents", set(charge, "amount", "10.5"), false},
		{"a charge whose confirm is not a boolean", post, "/v1/payment_intents", set(charge, "confirm", "yes"), false},
		{"a charge without automatic_payment_methods[enabled]", post, "/v1/payment_intents", del(charge, "automatic_payment_methods[enabled]"), false},
		{"a charge whose allow_redirects is outside its enum", post, "/v1/payment_intents", set(charge, "automatic_payment_methods[allow_redirects]", "sometimes"), false},
		{"a charge with an unknown parameter", post, "/v1/payment_intents", set(charge, "reference", "ch_1"), false},
		{"a charge to capture later", post, "/v1/payment_intents", later, true},
		{"a charge whose capture_method is outside its enum", post, "/v1/payment_intents", set(later, "capture_method", "later"), false},
		{"a capture", post, capturePath(ids.ToCapture, "capture"), capture, true},
		{"a capture whose amount_to_capture is not an integer", post, capturePath(ids.Held, "capture"), set(capture, "amount_to_capture", "5.5"), false},
		{"a capture with an unknown parameter", post, capturePath(ids.Held, "capture"), set(capture, "amount", "500"), false},
		{"a cancel", post, capturePath(ids.ToCancel, "cancel"), url.Values{}, true},
		{"a cancel whose cancellation_reason is outside its enum", post, capturePath(ids.Held, "cancel"), url.Values{"cancellation_reason": {"changed_mind"}}, false},
		{"a cancel with an unknown parameter", post, capturePath(ids.Held, "cancel"), url.Values{"reason": {"duplicate"}}, false},
		{"a refund", post, "/v1/refunds", refunds, true},
		{"a refund whose amount is not an integer", post, "/v1/refunds", set(refunds, "amount", "1.5"), false},
		{"a refund whose reason is outside its enum", post, "/v1/refunds", set(refunds, "reason", "changed_mind"), false},
		{"a refund with an unknown parameter", post, "/v1/refunds", set(refunds, "charge_id", "ch_1"), false},
		{"a retrieve", get, "/v1/payment_intents/" + intent, url.Values{}, true},
		{"a retrieve with an unknown parameter", get, "/v1/payment_intents/" + intent, url.Values{"fields": {"status"}}, false},
		{"a search", get, "/v1/payment_intents/search", search, true},
		{"a search without query", get, "/v1/payment_intents/search", del(search, "query"), false},
		{"a search whose limit is not an integer", get, "/v1/payment_intents/search", set(search, "limit", "ten"), false},
		{"a list", get, "/v1/payment_intents", list, true},
		{"a list paged on", get, "/v1/payment_intents", set(list, "starting_after", intent), true},
		{"a list whose created is not a time", get, "/v1/payment_intents", set(list, "created[gte]", "yesterday"), false},
		{"a list whose limit is not an integer", get, "/v1/payment_intents", set(list, "limit", "all"), false},
		{"a list with an unknown parameter", get, "/v1/payment_intents", set(list, "page_size", "100"), false},
		{"a refund's retrieve", get, "/v1/refunds/" + refund, url.Values{}, true},
		{"a refund's retrieve with an unknown parameter", get, "/v1/refunds/" + refund, url.Values{"fields": {"status"}}, false},
		{"a list of refunds", get, "/v1/refunds", refundList, true},
		{"a list of refunds paged on", get, "/v1/refunds", set(refundList, "starting_after", refund), true},
		{"a list of refunds whose limit is not an integer", get, "/v1/refunds", set(refundList, "limit", "all"), false},
		{"a list of refunds with an unknown parameter", get, "/v1/refunds", set(refundList, "page_size", "100"), false},
	}
}

// Send sends r to baseURL with apiKey, and key as its Idempotency-Key
// when it is a POST, and returns the answer's status.
func Send(t testing.TB, client *http.Client, baseURL, apiKey, key string, r Request) int {
	t.Helper()
	target, body := baseURL+r.Path, io.Reader(nil)
	if r.Method == http.MethodPost {
		body = strings.NewReader(r.Params.Encode())
	} else if len(r.Params) > 0 {
		target += "?" + r.Params.Encode()
	}
	req, err := http.NewRequestWithContext(t.Context(), r.Method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if r.Method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", r.Name, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}
